// Model: a loaded GGUF (llama_model) with its vocabulary and metadata.
#pragma once
#include <llama.h>
#include <napi.h>

#include <memory>
#include <mutex>
#include <string>

#include "model/adapter.h"
#include "model/rpc.h"
#include "model/tokenizer.h"

namespace llamux::media {
class Projector;
}

namespace llamux {

// Owns the llama_model. Engines hold a shared_ptr, so the weights outlive a disposed
// Model object until the last context using them is closed.
struct ModelHandle {
  llama_model *model = nullptr;
  const llama_vocab *vocab = nullptr;
  int32_t n_vocab = 0;
  std::string path;
  std::string fingerprint;  // identifies weights + vocab for cache keys
  // The RPC servers holding some of its layers (nullptr for a local model). When one of
  // them dies the model is never freed: freeing would wait on the dead server forever.
  std::shared_ptr<rpc::Group> rpc;
  // Loaded with its multi-token-prediction blocks (LoadOptions mtp on a model that has them).
  bool mtpLoaded = false;
  // The LoRA adapters loaded on it (Model.loadAdapter); llama.cpp frees them with the model.
  AdapterRegistry adapters;
  // The multimodal projector (loadModel { projector }), set once on the JS thread right after
  // the load, before any context exists (media/projector.h).
  std::shared_ptr<media::Projector> projector;
  // What the bounded tokenizer needs to know of the vocabulary (built on first use).
  const TokenizerIndex &Tokenizer();
  ~ModelHandle();

 private:
  std::once_flag tokOnce_;
  std::unique_ptr<TokenizerIndex> tok_;
};

class Model : public Napi::ObjectWrap<Model> {
 public:
  static Napi::Object Init(Napi::Env env, Napi::Object exports);
  explicit Model(const Napi::CallbackInfo &info);

  // Returns the handle or throws DISPOSED.
  std::shared_ptr<ModelHandle> Handle(Napi::Env env) const;
  static Model *Unwrap(Napi::Value v);

 private:
  static Napi::Value Load(const Napi::CallbackInfo &info);
  Napi::Value Tokenize(const Napi::CallbackInfo &info);
  Napi::Value TokenizeAsync(const Napi::CallbackInfo &info);
  Napi::Value Detokenize(const Napi::CallbackInfo &info);
  Napi::Value TokenPiece(const Napi::CallbackInfo &info);
  Napi::Value TokenInfo(const Napi::CallbackInfo &info);
  Napi::Value VocabInfo(const Napi::CallbackInfo &info);
  Napi::Value Metadata(const Napi::CallbackInfo &info);
  Napi::Value Dispose(const Napi::CallbackInfo &info);
  Napi::Value RpcState(const Napi::CallbackInfo &info);
  Napi::Value LoadAdapter(const Napi::CallbackInfo &info);  // adapter_js.cc
  Napi::Value Placement(const Napi::CallbackInfo &info);

  std::shared_ptr<ModelHandle> handle_;
};

}  // namespace llamux
