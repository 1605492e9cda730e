// The continuous-batching scheduler. Plain C++ (no Node-API): it owns one llama_context
// and is driven by one engine thread. It only orchestrates; each part lives in its own file:
//   intake.cc        commands from JS: new requests (tokenize, checks), cancels, pauses
//   admission.cc     placing waiting requests on sequences (orchestration only)
//   sequence.*       one sequence: its KV and the token list mirroring it (the only caller
//                    of llama_memory_seq_*), the save-before-overwrite rule
//   sessions.*       sessions: the session <-> sequence link and end/fork/expire/spill
//   reuse.*          measuring and carrying out a reuse plan; reuse_planner.* chooses it
//   state_tiers.*    saving and restoring sequence states (RAM and disk tiers)
//   batch.*          building and decoding one llama_batch, abort and KV-full recovery
//   output.*         token -> events, and the one final-event builder
//   preemption.cc, idle_kv.cc   a full KV cache; idle KV out of the attention window
// Each tick builds a single llama_batch from every active request (one token per decoding
// sequence first, then prompt chunks under the remaining per-tick budget), decodes it,
// samples, and hands events out in one batch.
#pragma once
#include "model/rpc.h"
#include <llama.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/batch.h"
#include "engine/embedder.h"
#include "sampling/grammar_cache.h"
#include "sampling/marker_matcher.h"
#include "engine/output.h"
#include "engine/request_state.h"
#include "kv/reuse.h"
#include "kv/reuse_planner.h"
#include "kv/sequence.h"
#include "kv/sessions.h"
#include "speculative/speculative.h"
#include "speculative/draft_model.h"
#include "speculative/mtp_draft.h"
#include "kv/state_tiers.h"
#include "engine/thread_pools.h"

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
  SpecConfig spec;           // speculative decoding (speculative.h); mode 0: off
  // The model's RPC servers (nullptr: local). When one is gone at shutdown, the context's
  // KV (partly on that server) is leaked instead of freed: freeing would wait on it forever.
  std::shared_ptr<rpc::Group> rpc;
};

// Counters the JS thread may read at any time.
struct CacheCounters {
  std::atomic<uint64_t> ramBytes{0}, ramEntries{0}, ramBudget{0}, ramEvictions{0};
  std::atomic<uint64_t> sessions{0}, pinned{0}, spills{0}, restores{0}, shares{0};
  std::atomic<uint64_t> diskBytes{0}, diskEntries{0}, diskBudget{0}, diskRestores{0}, diskRejected{0};
  std::atomic<int64_t> kvCellsUsed{0}, kvCellsTotal{0};
  std::atomic<uint64_t> preemptions{0};  // requests that gave up their KV to a full cache
  std::atomic<uint64_t> idleSpills{0};   // idle sequences moved to RAM so they stop taxing attention
  std::atomic<uint64_t> checkpoints{0}, checkpointBytes{0};  // held by the sequences (recurrent/hybrid)
  std::atomic<uint64_t> checkpointRestores{0};
  // speculative decoding: verifications run, draft tokens verified, draft tokens accepted
  std::atomic<uint64_t> specVerifications{0}, specDrafted{0}, specAccepted{0};
};

class Scheduler {
 public:
  using Flush = std::function<void(std::vector<Event> &&)>;

  Scheduler(llama_model *model, ContextConfig cfg, Flush flush);
  ~Scheduler();

  // ---- called from the JS thread -------------------------------------------------
  // Returns false when the wait queue is full.
  bool Submit(std::unique_ptr<RequestParams> params);
  // An embed or rerank job (embedder.h): runs beside the decodes, ends with an Embedded event.
  void SubmitEmbed(std::unique_ptr<EmbedJob> job);
  void Cancel(uint64_t id);
  void SetPaused(uint64_t id, bool paused);
  void Close();

  const CacheCounters &Counters() const { return counters_; }

  // ---- engine thread -------------------------------------------------------------
  // Creates the llama_context; false with `error` set on failure.
  bool Start(std::string *error);
  // Runs until Close(); ends every request with DISPOSED before returning.
  void Run();

 private:
  // llama_free(ctx_), guarded for contexts with KV on RPC servers (see ContextConfig::rpc).
  void FreeContext();

  static bool AbortCallback(void *data);

  // intake.cc: commands from JS
  void DrainCommands(bool wait);
  bool InitToolGrammar(Request &r, std::string *error);
  void Intake(std::unique_ptr<RequestParams> params);
  void CancelWaiting(uint64_t id);

  // scheduler.cc: the loop
  bool Admit();
  void DecodeBatch();
  void Finish(Request &r, FinishReason reason);
  void Fail(Request &r, ErrorCode code, const std::string &message);
  void FailBatch(ErrorCode code, const std::string &message);
  void Release(Request &r, bool keepKv);
  void WriteDirtyStates();
  static constexpr double kWriteThroughGraceMs = 300;
  void UpdateCounters();
  void Shutdown();

  // token_step.cc: one sampled token through the output path, and ending the request after it
  struct TokenStep {
    enum class Kind : uint8_t { Continue, Finish, Fail } kind = Kind::Continue;
    llama_token tok = -1;
    FinishReason reason = FinishReason::Eog;
    ErrorCode code = ErrorCode::Internal;
    std::string message;
  };
  TokenStep NextToken(Request &r, int32_t idx);
  void EndStep(Request &r, const TokenStep &st);

  // draft_verify.cc: speculative decoding (speculative.h)
  void PlanDrafts();
  void VerifyDraft(Request &r);
  struct SpecRun {
    bool on = false;           // the context speculates (mode set and the memory can drop drafts)
    std::string off;           // why it does not, when the mode asked for it
    bool noDraftTick = false;  // the last batch found no room with drafts: one tick without
    SpecEvidence evidence;     // how the context's drafts fared (a new request's first estimate)
  } spec_;
  std::unique_ptr<DraftModel> draft_;  // mode "draft" (destroyed before ctx_: declared later, freed first)
  std::unique_ptr<MtpDraft> mtp_;      // mode "mtp" (reset with draft_, before the pools detach)

  // preemption.cc: a full KV cache
  void OnKvFull();
  void Preempt(Request &r);
  void RequeuePreempted();
  bool HeldBack(const Request &r) const;

  // idle_kv.cc: idle KV out of the running requests' attention window
  void SpillTaxingIdleKv();

  // admission.cc: placing a request
  Placement TryAdmit(Request &r);
  Placement AdmitEnd(Request &r);
  Placement AdmitFork(Request &r);
  Sequence *FreeSequence(const std::vector<llama_token> &prompt, const std::string &scope);

  llama_model *model_;
  const llama_vocab *vocab_;
  int32_t nVocab_;
  ContextConfig cfg_;
  llama_context *ctx_ = nullptr;
  ThreadPools pools_;  // detached before ctx_ is freed, freed after (member destruction)
  bool poolsAwake_ = false;  // a graph ran since the pools were last paused (intake.cc)
  static constexpr int64_t kPoolsPauseMs = 5;
  uint32_t sequenceContextSize_ = 0;
  bool canTruncate_ = true;
  uint32_t rollback_ = 0;  // recurrent/hybrid memory: draft tokens llama.cpp can roll back (n_rs_seq)
  static constexpr uint32_t kMaxRollback = 7;  // snapshots of the recurrent state per sequence

  // Commands from JS.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<RequestParams>> submitted_;
  std::deque<std::unique_ptr<EmbedJob>> embedSubmitted_;
  std::vector<uint64_t> cancels_;
  std::vector<std::pair<uint64_t, bool>> pauses_;
  bool closing_ = false;
  uint32_t waitingCount_ = 0;        // submitted or queued, not yet on a sequence
  std::vector<uint64_t> inBatch_;    // request ids in the decode running now
  std::atomic<bool> abortNow_{false};

  // Engine-thread state.
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> active_;
  std::vector<Sequence> sequences_;  // built once in Start (Sessions and Reuse point into it)
  Sessions sessions_;
  Reuse reuse_;
  std::unique_ptr<Batch> batch_;
  std::unique_ptr<StateTiers> tiers_;
  Output output_;
  uint64_t finished_ = 0;  // requests that left a sequence by finishing or failing
  CacheCounters counters_;
  GrammarCache grammars_;               // parsed tool-call grammars
  std::vector<llama_token> eogTokens_;  // the vocabulary's end-of-generation tokens
  std::unique_ptr<Embedder> embedder_;  // embed/rerank jobs; destroyed before ctx_ (its pools)
  bool encoderOnly_ = false;            // no KV memory (BERT-style): embeddings only, no generation
};

}  // namespace llamux
