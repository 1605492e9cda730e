#include "media/projector.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include <gguf.h>
#include <mtmd.h>

#include "media/media_ids.h"

namespace llamux::media {

MediaChunk::~MediaChunk() {
  if (chunk != nullptr) mtmd_input_chunk_free(chunk);
}

namespace {

// The projector's identity: file size and 64 spread 4 KiB samples (as the model fingerprint).
void FileKey(const std::string &path, uint64_t *k1, uint64_t *k2, std::string *hex) {
  ContentHash h;
  h.Update("llamux-mmproj", 13);
  if (FILE *f = fopen(path.c_str(), "rb")) {
    if (fseek(f, 0, SEEK_END) == 0) {
      const long size = ftell(f);
      h.UpdateValue(static_cast<int64_t>(size));
      std::vector<unsigned char> buf(4096);
      for (int i = 0; i < 64 && size > 0; i++) {
        const long off = size > 4096 ? (size - 4096) / 63 * i : 0;
        if (fseek(f, off, SEEK_SET) != 0) break;
        h.Update(buf.data(), fread(buf.data(), 1, buf.size(), f));
        if (size <= 4096) break;
      }
    }
    fclose(f);
  }
  *k1 = h.a;
  *k2 = h.b;
  char out[33];
  snprintf(out, sizeof(out), "%016llx%016llx", static_cast<unsigned long long>(h.a), static_cast<unsigned long long>(h.b));
  *hex = out;
}

// What clip.cpp would assert on (process abort) is checked first: a GGUF whose
// architecture is "clip" with a vision or audio encoder.
void CheckProjectorFile(const std::string &path) {
  gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/nullptr};
  gguf_context *g = gguf_init_from_file(path.c_str(), params);
  if (g == nullptr) throw std::runtime_error("not a GGUF file (corrupt or truncated?)");
  std::string arch;
  const int64_t a = gguf_find_key(g, "general.architecture");
  if (a >= 0 && gguf_get_kv_type(g, a) == GGUF_TYPE_STRING) arch = gguf_get_val_str(g, a);
  auto flag = [&](const char *key) {
    const int64_t k = gguf_find_key(g, key);
    return k >= 0 && gguf_get_kv_type(g, k) == GGUF_TYPE_BOOL && gguf_get_val_bool(g, k);
  };
  const bool encoders = flag("clip.has_vision_encoder") || flag("clip.has_audio_encoder");
  gguf_free(g);
  if (arch != "clip") {
    throw std::runtime_error("a GGUF with architecture \"" + arch + "\", not a multimodal projector (\"clip\"): is it the text model?");
  }
  if (!encoders) throw std::runtime_error("a projector GGUF without a vision or audio encoder");
}

}  // namespace

Projector::Projector(const std::string &path, const llama_model *model, int32_t threads) {
  CheckProjectorFile(path);
  mtmd_context_params p = mtmd_context_params_default();
  p.use_gpu = true;
  p.print_timings = false;
  p.n_threads = threads;
  // the compute graph is reserved at load (as llama-server does), not in the first request
  p.warmup = true;
  ctx_ = mtmd_init_from_file(path.c_str(), model, p);
  if (ctx_ == nullptr) throw std::runtime_error("libmtmd could not load it");
  info_.vision = mtmd_support_vision(ctx_);
  info_.audio = mtmd_support_audio(ctx_);
  info_.audioSampleRate = mtmd_get_audio_sample_rate(ctx_);
  info_.mrope = mtmd_decode_use_mrope(ctx_);
  info_.nonCausal = mtmd_decode_use_non_causal(ctx_, nullptr);
  info_.marker = mtmd_get_marker(ctx_);
  nEmbd_ = llama_model_n_embd_inp(model);
  FileKey(path, &key1_, &key2_, &info_.fingerprint);
}

Projector::~Projector() {
  {
    std::lock_guard<std::mutex> lk(storeMu_);
    lru_.clear();
    byKey_.clear();
  }
  if (ctx_ != nullptr) mtmd_free(ctx_);
}

uint64_t Projector::StoreKey(const llama_token *ids, size_t n) {
  uint64_t k = Mix64(static_cast<uint32_t>(ids[0]));
  if (n > 1) k = Mix64(k ^ (static_cast<uint64_t>(static_cast<uint32_t>(ids[1])) << 32));
  return k;
}

MediaChunkPtr Projector::Find(const llama_token *ids, size_t n) {
  if (n == 0) return nullptr;
  std::lock_guard<std::mutex> lk(storeMu_);
  // a chunk of one embedding is keyed by its one id; longer ones by their first two
  for (size_t len : {size_t{2}, size_t{1}}) {
    if (len > n) continue;
    auto it = byKey_.find(StoreKey(ids, len));
    if (it == byKey_.end()) continue;
    const MediaChunkPtr &c = *it->second;
    if (c->ids.size() < len || (len == 1 && c->ids.size() != 1) || c->ids.size() > n) continue;
    if (!std::equal(c->ids.begin(), c->ids.end(), ids)) continue;
    lru_.splice(lru_.begin(), lru_, it->second);
    return c;
  }
  return nullptr;
}

void Projector::Remember(const MediaChunkPtr &chunk) {
  if (chunk->ids.empty()) return;
  const uint64_t key = StoreKey(chunk->ids.data(), std::min<size_t>(chunk->ids.size(), 2));
  std::lock_guard<std::mutex> lk(storeMu_);
  auto it = byKey_.find(key);
  if (it != byKey_.end()) {
    storeBytes_ -= (*it->second)->bytes;
    lru_.erase(it->second);
    byKey_.erase(it);
  }
  lru_.push_front(chunk);
  byKey_[key] = lru_.begin();
  storeBytes_ += chunk->bytes;
  while (storeBytes_ > kStoreBudget && lru_.size() > 1) {
    const MediaChunkPtr &old = lru_.back();
    storeBytes_ -= old->bytes;
    byKey_.erase(StoreKey(old->ids.data(), std::min<size_t>(old->ids.size(), 2)));
    lru_.pop_back();
  }
}

bool Projector::Encode(const MediaChunk &chunk, std::vector<float> *embd, std::string *error, ggml_threadpool *pool) {
  std::lock_guard<std::mutex> lk(encodeMu_);
  int32_t rc;
  // The pool is lent for this encode only: it belongs to a context that may be freed before
  // the projector (which the model owns).
  mtmd_set_cpu_threadpool(ctx_, pool);
  try {
    rc = mtmd_encode_chunk(ctx_, chunk.chunk);
  } catch (const std::exception &e) {
    mtmd_set_cpu_threadpool(ctx_, nullptr);
    *error = e.what();
    return false;
  }
  mtmd_set_cpu_threadpool(ctx_, nullptr);
  if (rc != 0) {
    *error = "mtmd_encode_chunk failed with code " + std::to_string(rc);
    return false;
  }
  const float *out = mtmd_get_output_embd(ctx_);
  const size_t n = static_cast<size_t>(nEmbd_) * chunk.ids.size();
  embd->assign(out, out + n);
  return true;
}

}  // namespace llamux::media
