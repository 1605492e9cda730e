// Model.loadAdapter(path): a LoRA adapter loaded on a worker thread (llama_adapter_lora_init),
// registered on the model's handle (adapter.h). Part of the Model class (model.h).
#include <sys/stat.h>

#include <vector>

#include <gguf.h>

#include "engine/errors.h"
#include "js/addon.h"
#include "js/napi_util.h"
#include "model/adapter.h"
#include "model/model.h"

namespace llamux {

namespace {

// llama.cpp checks an adapter's architecture and tensor shapes (an adapted output head or
// embedding of another vocabulary fails there), not the vocabulary itself: an adapter that says
// which vocabulary it was trained with (its own tokenizer tokens, or <arch>.vocab_size) and names
// another is refused here. "" when it fits or says nothing; unreadable files are llama.cpp's to report.
std::string VocabularyMismatch(const std::string &path, int32_t nVocab) {
  gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/nullptr};
  gguf_context *g = gguf_init_from_file(path.c_str(), params);
  if (g == nullptr) return "";
  std::string why;
  const int64_t tokens = gguf_find_key(g, "tokenizer.ggml.tokens");
  if (tokens >= 0 && gguf_get_kv_type(g, tokens) == GGUF_TYPE_ARRAY && static_cast<int64_t>(gguf_get_arr_n(g, tokens)) != nVocab) {
    why = "its tokenizer has " + std::to_string(gguf_get_arr_n(g, tokens)) + " tokens";
  }
  const int64_t arch = gguf_find_key(g, "general.architecture");
  if (why.empty() && arch >= 0 && gguf_get_kv_type(g, arch) == GGUF_TYPE_STRING) {
    const int64_t size = gguf_find_key(g, (std::string(gguf_get_val_str(g, arch)) + ".vocab_size").c_str());
    if (size >= 0 && gguf_get_kv_type(g, size) == GGUF_TYPE_UINT32 && static_cast<int64_t>(gguf_get_val_u32(g, size)) != nVocab) {
      why = "it was made for a vocabulary of " + std::to_string(gguf_get_val_u32(g, size)) + " tokens";
    }
  }
  gguf_free(g);
  if (why.empty()) return "";
  return why + ", this model's vocabulary has " + std::to_string(nVocab);
}

class AdapterWorker : public Napi::AsyncWorker {
 public:
  AdapterWorker(Napi::Env env, std::shared_ptr<ModelHandle> handle, std::string path)
      : Napi::AsyncWorker(env, "llamux.loadAdapter"),
        deferred_(Napi::Promise::Deferred::New(env)),
        handle_(std::move(handle)),
        path_(std::move(path)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    struct stat st {};
    if (stat(path_.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      Fail(ErrorCode::ModelNotFound, "LoRA adapter file not found: \"" + path_ + "\"");
      return;
    }
    const std::string vocab = VocabularyMismatch(path_, handle_->n_vocab);
    if (!vocab.empty()) {
      Fail(ErrorCode::ModelInvalid, "LoRA adapter \"" + path_ + "\" is for another vocabulary: " + vocab);
      return;
    }
    LogCapture capture;
    llama_adapter_lora *lora = nullptr;
    std::string detail;
    {
      std::unique_lock<std::shared_mutex> lk(AdapterLoadMutex());
      try {
        lora = llama_adapter_lora_init(handle_->model, path_.c_str());
      } catch (const std::exception &e) {
        lora = nullptr;
        detail = e.what();
      }
    }
    if (lora == nullptr) {
      std::string why = capture.Text();
      if (why.empty()) why = detail;
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      std::string msg = "Failed to load LoRA adapter \"" + path_ +
                        "\": not a LoRA adapter of this model's architecture and shapes";
      if (!why.empty()) msg += " (llama.cpp: " + why + ")";
      Fail(ErrorCode::ModelInvalid, msg);
      return;
    }
    // An activated LoRA (aLoRA) applies only after its invocation tokens; the engine applies
    // adapters to whole requests, so it would compute something else than it was trained for.
    if (llama_adapter_get_alora_n_invocation_tokens(lora) > 0) {
      std::unique_lock<std::shared_mutex> lk(AdapterLoadMutex());
      llama_adapter_lora_free(lora);
      Fail(ErrorCode::Unsupported, "LoRA adapter \"" + path_ + "\" is an activated LoRA (aLoRA), which llamux does not support");
      return;
    }
    for (int32_t i = 0, n = llama_adapter_meta_count(lora); i < n; i++) {
      char key[256];
      std::vector<char> val(4096);
      if (llama_adapter_meta_key_by_index(lora, i, key, sizeof(key)) < 0) continue;
      int32_t len = llama_adapter_meta_val_str_by_index(lora, i, val.data(), val.size());
      meta_.emplace_back(key, len > 0 ? std::string(val.data(), std::min<size_t>(static_cast<size_t>(len), val.size() - 1)) : "");
    }
    entry_ = handle_->adapters.Add(lora, path_, AdapterFingerprint(path_, lora));
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("id", entry_.id);
    o.Set("path", entry_.path);
    o.Set("fingerprint", entry_.fingerprint);
    Napi::Object meta = Napi::Object::New(env);
    for (const auto &kv : meta_) meta.Set(kv.first, kv.second);
    o.Set("metadata", meta);
    deferred_.Resolve(o);
  }

  void OnError(const Napi::Error &) override { deferred_.Reject(CodedError(Env(), code_, message_).Value()); }

 private:
  void Fail(ErrorCode code, std::string message) {
    code_ = code;
    message_ = std::move(message);
    SetError(message_);
  }

  Napi::Promise::Deferred deferred_;
  std::shared_ptr<ModelHandle> handle_;
  std::string path_;
  LoadedAdapter entry_;
  std::vector<std::pair<std::string, std::string>> meta_;
  ErrorCode code_ = ErrorCode::Internal;
  std::string message_;
};

}  // namespace

// loadAdapter(path) -> Promise<{ id, path, fingerprint, metadata }>; rejects MODEL_NOT_FOUND,
// MODEL_INVALID (not an adapter of this model), UNSUPPORTED (aLoRA, RPC or vocabulary-only
// models), DISPOSED.
Napi::Value Model::LoadAdapter(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  LLAMUX_REQUIRE_STRING(info, 0, "path");
  std::shared_ptr<ModelHandle> h = Handle(env);
  // Layers on RPC servers: a load or a decode could wait on a dead server with the adapter lock
  // held. A vocabulary-only model has no tensors to adapt.
  if (h->rpc) ThrowCoded(env, ErrorCode::Unsupported, "LoRA adapters are not supported on models with layers on RPC servers");
  if (llama_model_n_layer(h->model) == 0) ThrowCoded(env, ErrorCode::Unsupported, "LoRA adapters need a model loaded with its weights (not vocabOnly)");
  auto *worker = new AdapterWorker(env, std::move(h), info[0].As<Napi::String>().Utf8Value());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace llamux
