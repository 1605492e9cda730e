// The continuous-batching scheduler. Plain C++ (no Node-API): it owns one llama_context
// and is driven by one engine thread. Each tick builds a single llama_batch from every
// active request (one token per decoding sequence first, then prompt chunks under the
// remaining per-tick budget), decodes it, samples, and hands events out in one batch.
#pragma once
#include <llama.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "marker_matcher.h"
#include "disk_tier.h"
#include "prefix_cache.h"
#include "request.h"

namespace llamux {

struct EngineConfig {
  uint32_t nCtx = 4096;
  uint32_t nBatch = 512;
  uint32_t nUbatch = 512;
  uint32_t nSeqMax = 1;
  int32_t nThreads = 0;       // 0: hardware threads
  int32_t nThreadsBatch = 0;  // 0: same as nThreads
  bool kvUnified = true;
  int32_t flashAttn = -1;  // -1 auto, 0 off, 1 on
  int32_t typeK = -1;      // ggml_type, -1: llama.cpp default
  int32_t typeV = -1;
  uint32_t maxQueued = 1024;
  uint32_t prefillChunk = 0;  // prompt tokens per tick, 0: nBatch
  MarkerSet markers;          // tool-call markers (token ids); empty: plain text path
  size_t cacheRamBytes = 256u << 20;  // RAM tier budget; 0 disables it
  uint32_t sessionTtlMs = 600000;     // idle sessions are released after this
  std::string cacheDir;               // disk tier folder ("" disables it)
  uint64_t cacheDiskBytes = 4ull << 30;
  std::string modelFingerprint;
  bool reuse = true;  // false: every request prefills its whole prompt (a baseline)
};

// Counters the JS thread may read at any time.
struct CacheCounters {
  std::atomic<uint64_t> ramBytes{0}, ramEntries{0}, ramBudget{0}, ramEvictions{0};
  std::atomic<uint64_t> sessions{0}, pinned{0}, spills{0}, restores{0}, shares{0};
  std::atomic<uint64_t> diskBytes{0}, diskEntries{0}, diskBudget{0}, diskRestores{0}, diskRejected{0};
  std::atomic<int64_t> kvCellsUsed{0}, kvCellsTotal{0};
};

class Scheduler {
 public:
  using Flush = std::function<void(std::vector<Event> &&)>;

  Scheduler(llama_model *model, EngineConfig cfg, Flush flush);
  ~Scheduler();

  // ---- called from the JS thread -------------------------------------------------
  // Returns false when the wait queue is full.
  bool Submit(std::unique_ptr<RequestParams> params);
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
  struct Request;
  struct Slot {
    int32_t seq = 0;
    Request *req = nullptr;
    std::vector<llama_token> tokens;  // what this sequence's KV holds, in order
    std::string session;              // pinned to this session ("" = free for anyone)
    Clock::time_point lastUsed;
  };
  struct Session {
    std::vector<llama_token> transcript;  // committed tokens (prompt + generated, no EOG)
    int32_t slot = -1;                    // pinned slot, or -1 (spilled to RAM or cold)
    Clock::time_point lastUsed;
    bool busy = false;
    bool endAfter = false;
  };
  enum class Placement { Placed, Wait, Done };

  static bool AbortCallback(void *data);

  void DrainCommands(bool wait);
  bool Admit();
  Placement TryAdmit(Request &r);
  void FailRequest(Request &r, const char *code, const std::string &message);
  Slot *FreeSlot(const std::vector<llama_token> &prompt);
  Slot *SpillIdleSession(const std::string &keep);
  bool SaveToRam(Slot &s, const std::string &session);
  bool RestoreBlob(Slot &s, const CacheEntry &e, double *ms);
  void EndSession(const std::string &id);
  void ExpireSessions();
  void UpdateCounters();
  const std::vector<llama_token> &KvTokens(const Slot &s) const;
  bool BuildBatch();
  void DecodeBatch();
  void HandleToken(Request &r, llama_token tok);
  bool ProcessOutputs(Request &r, const std::vector<MarkerMatcher::Output> &outs);
  void EmitPendingText(Request &r, bool evenIfEmpty);
  void EmitSpanDelta(Request &r);
  void CloseSpan(Request &r, bool truncated);
  std::string Piece(llama_token tok, bool special) const;
  void Finish(Request &r, const char *reason, const char *code = nullptr, const std::string &message = "");
  void FailBatch(const char *code, const std::string &message);
  void Emit(Event &&ev);
  void FlushEvents(bool force = false);
  void ReleaseSlot(Request &r, bool keepKv);
  bool TokenizePrompt(Request &r, std::string *error);

  llama_model *model_;
  const llama_vocab *vocab_;
  int32_t nVocab_;
  EngineConfig cfg_;
  Flush flush_;
  llama_context *ctx_ = nullptr;
  llama_memory_t mem_ = nullptr;
  llama_batch batch_{};
  uint32_t nCtxSeq_ = 0;
  uint32_t tickBudget_ = 0;
  bool canTruncate_ = true;

  // Commands from JS.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<RequestParams>> submitted_;
  std::vector<uint64_t> cancels_;
  std::vector<std::pair<uint64_t, bool>> pauses_;
  bool closing_ = false;
  uint32_t waitingCount_ = 0;        // submitted or queued, not yet on a sequence
  std::vector<uint64_t> inBatch_;    // request ids in the decode running now
  std::atomic<bool> abortNow_{false};

  // Engine-thread state.
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> active_;
  std::vector<Slot> slots_;
  std::vector<Request *> batchReqs_;
  std::vector<Event> events_;
  std::vector<MarkerMatcher::Output> outs_;
  std::unordered_map<std::string, Session> sessions_;
  std::unique_ptr<StateCache> ram_;
  std::unique_ptr<DiskTier> disk_;
  Clock::time_point lastExpiry_;
  Clock::time_point lastFlush_;
  CacheCounters counters_;
  mutable std::vector<llama_token> scratch_;
};

}  // namespace llamux
