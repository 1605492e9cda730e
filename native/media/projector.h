// A model's multimodal projector (libmtmd's mtmd_context over the text model) and the media
// it has tokenized. Shared by every context of the model (ModelHandle::projector); encodes are
// serialized (mtmd keeps the last output embeddings in its context).
#pragma once
#include <llama.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

struct mtmd_context;
struct mtmd_input_chunk;

namespace llamux::media {

// One image or audio clip as tokenized for this projector: its pseudo token ids (media_ids.h)
// and libmtmd's chunk (the preprocessed pixels or samples, what mtmd_encode_chunk needs).
struct MediaChunk {
  std::vector<llama_token> ids;
  mtmd_input_chunk *chunk = nullptr;  // owned
  bool audio = false;
  size_t bytes = 0;  // decoded size, for the store's budget
  MediaChunk() = default;
  MediaChunk(const MediaChunk &) = delete;
  MediaChunk &operator=(const MediaChunk &) = delete;
  ~MediaChunk();
};

using MediaChunkPtr = std::shared_ptr<const MediaChunk>;

struct ProjectorInfo {
  bool vision = false;
  bool audio = false;
  int32_t audioSampleRate = -1;
  bool mrope = false;      // the text model takes M-RoPE positions (Qwen-VL style)
  bool nonCausal = false;  // media embeddings are decoded with non-causal attention (Gemma 3)
  std::string marker;      // the media marker in prompt text
  std::string fingerprint; // identifies the projector's weights (part of every media id)
};

class Projector {
 public:
  // Throws std::runtime_error with llama.cpp's reason when the file is no projector for `model`.
  Projector(const std::string &path, const llama_model *model, int32_t threads);
  ~Projector();
  Projector(const Projector &) = delete;
  Projector &operator=(const Projector &) = delete;

  const ProjectorInfo &Info() const { return info_; }
  mtmd_context *Ctx() const { return ctx_; }
  uint64_t Key1() const { return key1_; }
  uint64_t Key2() const { return key2_; }

  // Media tokenized earlier, found by the ids at `ids` (n of them available): the chunk whose
  // ids all match, or nullptr. Earlier turns of a conversation find their media here.
  MediaChunkPtr Find(const llama_token *ids, size_t n);
  void Remember(const MediaChunkPtr &chunk);

  // mtmd_encode_chunk then the embeddings copied out, under the encode lock. False on failure.
  // pool: a ggml thread pool of the calling thread's to compute on (the engine lends its
  // context's; see the mtmd-cpu-threadpool patch); nullptr: ggml's threads per graph.
  bool Encode(const MediaChunk &chunk, std::vector<float> *embd, std::string *error, ggml_threadpool *pool = nullptr);

 private:
  static uint64_t StoreKey(const llama_token *ids, size_t n);
  mtmd_context *ctx_ = nullptr;
  ProjectorInfo info_;
  uint64_t key1_ = 0, key2_ = 0;
  int32_t nEmbd_ = 0;
  std::mutex encodeMu_;
  // Tokenized media, most recent first, bounded by decoded bytes.
  std::mutex storeMu_;
  std::list<MediaChunkPtr> lru_;
  std::unordered_map<uint64_t, std::list<MediaChunkPtr>::iterator> byKey_;
  size_t storeBytes_ = 0;
  static constexpr size_t kStoreBudget = 512ull << 20;
};

}  // namespace llamux::media
