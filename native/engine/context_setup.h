// The context's settings (ContextConfig, read from JS in js/context.cc) and what follows from
// them when the llama_context is made: llama.cpp's parameters, what the memory can do, the
// layout key, the ready report. Plain C++.
#pragma once
#include <llama.h>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/request.h"
#include "media/projector.h"
#include "model/rpc.h"
#include "sampling/marker_matcher.h"
#include "speculative/speculative.h"

namespace llamux {

// Read from required keys of the JS options (src/native/request.ts contextConfig builds them
// complete); the initialisers are neutral zeros, not defaults.
struct ContextConfig {
  uint32_t contextSize = 0;
  uint32_t batchSize = 0;
  uint32_t microBatchSize = 0;
  uint32_t sequences = 0;
  int32_t threads = 0;       // 0: hardware threads
  int32_t batchThreads = 0;  // 0: same as nThreads
  bool unifiedKv = false;
  bool swaFull = true;  // llama.cpp's swa_full: sliding-window layers keep every position
  int32_t flashAttention = 0;  // -1 auto, 0 off, 1 on
  int32_t kvTypeK = 0;         // ggml_type, -1: llama.cpp default
  int32_t kvTypeV = 0;
  uint32_t maxQueued = 0;
  uint32_t prefillChunk = 0;  // prompt tokens per tick, 0: batchSize
  MarkerSet markers;          // tool-call markers (token ids); empty: plain text path
  size_t cacheRamBytes = 0;   // RAM tier budget; 0 disables it
  uint32_t sessionTtlMs = 0;  // idle sessions are released after this
  uint32_t idleKvSpillMs = 0; // idle KV older than this leaves a busy cache (0: never)
  std::string cacheDir;       // disk tier folder ("" disables it)
  bool diskWriteThrough = false;  // write each finished request's KV to the disk tier
  uint64_t cacheDiskBytes = 0;
  std::string modelFingerprint;
  bool deterministic = false;  // issue 26: logits independent of batching (thread_pools.h)
  bool prefixCache = false;  // false: every request prefills its whole prompt (a baseline)
  uint32_t checkpoints = 4;  // per sequence, recurrent/hybrid memories (Sequence::SetMaxCheckpoints)
  SpecConfig spec;           // speculative decoding (speculation.h); mode Off: none
  // The model's RPC servers (nullptr: local). When one is gone at shutdown, the context's
  // KV (partly on that server) is leaked instead of freed: freeing would wait on it forever.
  std::shared_ptr<rpc::Group> rpc;
  // The model's multimodal projector (nullptr: text only): media runs are encoded and decoded
  // by the MediaStep (media/media_step.h).
  std::shared_ptr<media::Projector> projector;
};

// llama.cpp's context parameters for `cfg` (abort: polled during every decode).
llama_context_params ContextParams(const ContextConfig &cfg, const llama_model *model, ggml_abort_callback abort, void *abortData);

// What the context's memory can do.
struct MemoryTraits {
  bool partial = false;      // recurrent or hybrid: no tail can be dropped (checkpoints instead)
  bool swaLimited = false;   // a sliding-window cache without swa_full forgets what leaves the window
  bool canTruncate = true;   // a sequence's tail can be dropped
  uint32_t rollback = 0;     // draft tokens a recurrent state rolls back (llama.cpp's n_rs_seq)
};
MemoryTraits ProbeMemory(const llama_model *model, llama_context *ctx, const ContextConfig &cfg);

// Snapshots of the recurrent state per sequence when a recurrent/hybrid context speculates.
constexpr uint32_t kMaxRollback = 7;

// Which saved states (disk tier files) and warmed prefixes (JS prefix keys) are valid here:
// same weights, same KV layout.
std::string ContextLayoutKey(const ContextConfig &cfg, llama_context *ctx, const llama_context_params &cp, const MemoryTraits &m);

// The context's ready report: its settings as llama.cpp applied them.
Event ReadyEvent(llama_context *ctx, const ContextConfig &cfg, const llama_context_params &cp, const MemoryTraits &mem,
                 const std::string &layoutKey, const char *speculative, const std::string &speculativeOff);

// llama_free, guarded for contexts with KV on RPC servers (see ContextConfig::rpc).
void FreeContext(llama_context *ctx, const std::shared_ptr<rpc::Group> &rpc);

}  // namespace llamux
