// The continuous-batching scheduler: one llama_context driven by one engine thread. It only
// coordinates; each part owns its state and lives in its own file:
//   command_queue  commands from JS (the one lock) and the decode's abort flag
//   intake         a new request checked and made ready (sampler, grammar, matchers)
//   admission      the waiting requests, placed on sequences (sessions, reuse plans)
//   lifecycle      every change of a request's phase (request_state.h), its sequence link
//   batch          one llama_batch per tick: build, decode, commit, recover
//   token_step     one sampled token through the output path (output.h: tokens -> events)
//   speculation    drafts (speculative/drafter.h) and their verification
//   embedder       embedding and rerank jobs beside the decodes
//   idle_kv, preemption   idle KV out of the window / to disk; a full KV cache
//   gauges         the counters JS reads
// and the KV side in native/kv/ (Sequence owns a sequence's KV, Sessions, Reuse, the tiers).
// Each tick builds a single llama_batch from every active request (one token per decoding
// sequence first, then prompt chunks under the remaining per-tick budget), decodes it,
// samples, and hands events out in one batch. Plain C++ (no Node-API).
#pragma once
#include <llama.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/batch.h"
#include "engine/command_queue.h"
#include "engine/context_setup.h"
#include "engine/embedder.h"
#include "engine/gauges.h"
#include "engine/output.h"
#include "engine/request_state.h"
#include "engine/thread_pools.h"
#include "kv/reuse.h"
#include "kv/sequence.h"
#include "kv/sessions.h"
#include "kv/state_tiers.h"
#include "media/media_step.h"

namespace llamux {

class Admission;
class IdleKv;
class Intake;
class Lifecycle;
class Speculation;
class TokenStepper;

class Scheduler {
 public:
  using Flush = std::function<void(std::vector<Event> &&)>;

  Scheduler(llama_model *model, ContextConfig cfg, Flush flush);
  ~Scheduler();

  // ---- called from the JS thread -------------------------------------------------
  // Returns false when the wait queue is full.
  bool Submit(std::unique_ptr<RequestParams> params);
  // An embed or rerank job (embedder.h): runs beside the decodes, ends with an Embedded event.
  void SubmitEmbed(std::unique_ptr<EmbedJob> job) { queue_.SubmitEmbed(std::move(job)); }
  void Cancel(uint64_t id) { queue_.Cancel(id); }
  void SetPaused(uint64_t id, bool paused) { queue_.SetPaused(id, paused); }
  void Close() { queue_.Close(); }
  const CacheCounters &Counters() const { return counters_; }

  // ---- engine thread -------------------------------------------------------------
  // Creates the llama_context and the parts; false with `error` set on failure.
  bool Start(std::string *error);
  // Runs until Close(); ends every request with DISPOSED before returning.
  void Run();

 private:
  bool Tick();           // admission, drafts, one batch, one embedding batch; true: a request moved
  void Decode();         // the batch's llama_decode and what follows it
  void Drain(bool wait); // the commands JS queued (waits for one when `wait`)
  void Shutdown();

  llama_model *model_;
  ContextConfig cfg_;
  llama_context *ctx_ = nullptr;
  ThreadPools pools_;        // detached before ctx_ is freed, freed after (member destruction)
  bool poolsAwake_ = false;  // a graph ran since the pools were last paused
  static constexpr int64_t kPoolsPauseMs = 5;

  CommandQueue queue_;
  CacheCounters counters_;
  Gauges gauges_{&counters_};
  Output output_;
  std::vector<Sequence> sequences_;  // built once in Start (the parts point into it)
  std::unique_ptr<StateTiers> tiers_;
  Sessions sessions_;
  Reuse reuse_;
  std::unique_ptr<Lifecycle> life_;
  std::unique_ptr<Intake> intake_;  // before the requests: their samplers use its grammars
  std::unique_ptr<Admission> admission_;
  std::vector<std::unique_ptr<Request>> active_;
  std::unique_ptr<Batch> batch_;
  std::unique_ptr<Speculation> spec_;  // its drafter is freed before ctx_ (Stop)
  std::unique_ptr<TokenStepper> steps_;
  std::unique_ptr<IdleKv> idleKv_;
  std::unique_ptr<Embedder> embedder_;  // destroyed before ctx_ (its pools)
  std::unique_ptr<media::MediaStep> media_;  // with a projector only
};

}  // namespace llamux
