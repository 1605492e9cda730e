// LoRA adapters: the ones a model loaded (AdapterRegistry, on its ModelHandle) and the set a
// request decodes with (AdapterSet). llama.cpp applies adapters per context
// (llama_set_adapters_lora), so a batch holds requests of one set only (Batch::Build picks the
// set of each tick) and the set is part of every KV reuse key (AdapterSet::Key, folded into the
// request's cache scope). Plain C++ (no Node-API); the registry is shared by the JS thread
// (loadAdapter, request readers) and the loader threads, hence its lock.
#pragma once
#include <llama.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

namespace llamux {

struct LoadedAdapter {
  int32_t id = 0;                       // unique in the process: an id of another model is never found
  llama_adapter_lora *lora = nullptr;   // owned by the llama_model (freed with it)
  std::string path;
  std::string fingerprint;              // identifies the adapter's weights (cache keys)
};

class AdapterRegistry {
 public:
  // Registers a loaded adapter under a new process-wide id; returns its entry.
  LoadedAdapter Add(llama_adapter_lora *lora, std::string path, std::string fingerprint);
  // The adapter with that id, or false when this model never loaded it.
  bool Find(int32_t id, LoadedAdapter *out) const;

 private:
  mutable std::mutex mu_;
  std::vector<LoadedAdapter> adapters_;
};

// A request's adapters with their scales, normalized: zero scales dropped (llama.cpp skips
// them, so the computation is the base model's), sorted by id, no duplicates. Empty: the base.
struct AdapterSet {
  std::vector<llama_adapter_lora *> loras;
  std::vector<float> scales;
  std::string key;  // "" for the base model; otherwise the fingerprints and exact scales

  bool Empty() const { return loras.empty(); }
  // Builds a set from parallel id/scale lists; false with `error` set for an unknown id, a
  // repeated one or a scale that is not finite.
  static bool Make(const AdapterRegistry &registry, const int32_t *ids, const float *scales, size_t n, AdapterSet *out,
                   std::string *error);
};

// The KV scope a request's reuse compares: the tenant's cache scope and its adapter set. KV
// computed under different adapters or scales never matches; with no adapters it is the cache
// scope unchanged (so base-model KV keeps sharing with everyone, and the prefix tiers).
std::string AdapterScope(const std::string &cacheScope, const AdapterSet &set);

// Makes `ctx` decode with `set` (llama.cpp only rebuilds its graph reservation when it
// changed). False when llama.cpp refused it.
bool ApplyAdapters(llama_context *ctx, const AdapterSet &set);

// The fingerprint of an adapter file: size, 64 evenly spread 4 KiB samples (all of a small
// file) and the adapter's metadata.
std::string AdapterFingerprint(const std::string &path, const llama_adapter_lora *lora);

}  // namespace llamux

namespace llamux {
// llama.cpp registers a new adapter in the model's adapter set (an unordered_set, unlocked),
// which a context reads when it reserves its graph (after an adapter switch). Loads hold this
// exclusively; a decode that switches adapters holds it shared.
std::shared_mutex &AdapterLoadMutex();
}  // namespace llamux

namespace llamux {
// llama_init_from_model under AdapterLoadMutex (shared): a new context reserves its graph,
// reading the model's adapter list. Exceptions pass through.
llama_context *InitContext(llama_model *model, const llama_context_params &params);
}  // namespace llamux
