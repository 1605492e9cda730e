#include "engine/context_setup.h"

#include <algorithm>
#include <thread>

#include "kv/hash.h"

namespace llamux {

llama_context_params ContextParams(const ContextConfig &cfg, const llama_model *model, ggml_abort_callback abort, void *abortData) {
  llama_context_params cp = llama_context_default_params();
  int32_t hw = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  cp.n_ctx = cfg.contextSize;
  cp.n_batch = cfg.batchSize;
  cp.n_ubatch = std::min(cfg.microBatchSize, cfg.batchSize);
  cp.n_seq_max = cfg.sequences;
  cp.n_threads = cfg.threads > 0 ? cfg.threads : hw;
  cp.n_threads_batch = cfg.batchThreads > 0 ? cfg.batchThreads : cp.n_threads;
  cp.kv_unified = cfg.unifiedKv;
  cp.swa_full = cfg.swaFull;
  cp.flash_attn_type = static_cast<llama_flash_attn_type>(cfg.flashAttention);
  if (cfg.kvTypeK >= 0) cp.type_k = static_cast<ggml_type>(cfg.kvTypeK);
  if (cfg.kvTypeV >= 0) cp.type_v = static_cast<ggml_type>(cfg.kvTypeV);
  cp.no_perf = true;
  // Speculation on a recurrent/hybrid memory: llama.cpp keeps a snapshot of the recurrent state
  // after each of the last decode's trailing tokens, so the rejected draft cells can be rolled
  // back (architectures that support it; llama_n_rs_seq says 0 otherwise). Each snapshot is a
  // copy of the sequence's recurrent state: drafts on such models stop at kMaxRollback tokens.
  const bool partial = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
  if (cfg.spec.mode != SpecMode::Off && partial) cp.n_rs_seq = std::min<uint32_t>(cfg.spec.draftMax, kMaxRollback);
  cp.abort_callback = abort;
  cp.abort_callback_data = abortData;
  return cp;
}

MemoryTraits ProbeMemory(const llama_model *model, llama_context *ctx, const ContextConfig &cfg) {
  MemoryTraits m;
  m.partial = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
  // Recurrent and hybrid memories cannot drop a tail of a sequence: they reuse whole states and
  // checkpoints (Sequence). A sliding-window cache without swa_full forgets what falls out of
  // the window: whole states only (no checkpoints: a sequence extends, or is recomputed).
  m.swaLimited = !cfg.swaFull && llama_model_n_swa(model) > 0;
  m.canTruncate = !m.partial && !m.swaLimited;
  m.rollback = m.partial && !m.swaLimited ? llama_n_rs_seq(ctx) : 0;
  return m;
}

std::string ContextLayoutKey(const ContextConfig &cfg, llama_context *ctx, const llama_context_params &cp, const MemoryTraits &m) {
  // (a window-only sliding-window cache has another layout: its own key)
  return LayoutKey(cfg.modelFingerprint + (m.swaLimited ? "|swa-window" : ""), cp.type_k, cp.type_v, cfg.unifiedKv,
                   static_cast<int32_t>(llama_n_ctx_seq(ctx)), cfg.flashAttention);
}

Event ReadyEvent(llama_context *ctx, const ContextConfig &cfg, const llama_context_params &cp, const MemoryTraits &mem,
                 const std::string &layoutKey, const char *speculative, const std::string &speculativeOff) {
  Event ev;
  ev.type = EventType::Ready;
  ReadyInfo &r = ev.ready;
  r.contextSize = llama_n_ctx(ctx);
  r.sequenceContextSize = llama_n_ctx_seq(ctx);
  r.batchSize = cfg.batchSize;
  r.microBatchSize = cfg.microBatchSize;
  r.sequences = cfg.sequences;
  r.threads = llama_n_threads(ctx);
  r.batchThreads = llama_n_threads_batch(ctx);
  r.unifiedKv = cfg.unifiedKv;
  r.flashAttention = cfg.flashAttention;
  r.layoutKey = layoutKey;
  r.kvTypeK = static_cast<int32_t>(cp.type_k);
  r.kvTypeV = static_cast<int32_t>(cp.type_v);
  r.canTruncateKv = mem.canTruncate;
  r.speculative = speculative;
  r.speculativeOff = speculativeOff;
  return ev;
}

void FreeContext(llama_context *ctx, const std::shared_ptr<rpc::Group> &rpc) {
  if (ctx == nullptr) return;
  if (!rpc) {
    llama_free(ctx);
    return;
  }
  // KV partly on RPC servers: freeing sends to them, so never wait on a dead one (leaked).
  rpc::RunGuarded(rpc, [ctx] { llama_free(ctx); }, 10000);
}

}  // namespace llamux
