#include "engine/scheduler.h"

#include <algorithm>
#include <thread>

#include "kv/hash.h"
#include "kv/kv_cells.h"

namespace llamux {

Scheduler::Scheduler(llama_model *model, ContextConfig cfg, Flush flush)
    : model_(model), vocab_(llama_model_get_vocab(model)), cfg_(std::move(cfg)),
      output_(vocab_, &cfg_.markers, std::move(flush)) {
  nVocab_ = llama_vocab_n_tokens(vocab_);
  for (llama_token t = 0; t < nVocab_; t++) {
    if (llama_vocab_is_eog(vocab_, t)) eogTokens_.push_back(t);
  }
}

Scheduler::~Scheduler() {
  embedder_.reset();
  draft_.reset();
  mtp_.reset();
  batch_.reset();
  tiers_.reset();
  pools_.Detach(ctx_);
  if (ctx_ != nullptr) FreeContext();
}

void Scheduler::FreeContext() {
  llama_context *ctx = ctx_;
  ctx_ = nullptr;
  if (!cfg_.rpc) {
    llama_free(ctx);
    return;
  }
  // KV partly on RPC servers: freeing sends to them, so never wait on a dead one (leaked).
  rpc::RunGuarded(cfg_.rpc, [ctx] { llama_free(ctx); }, 10000);
}

bool Scheduler::AbortCallback(void *data) {
  return static_cast<Scheduler *>(data)->abortNow_.load(std::memory_order_relaxed);
}

bool Scheduler::Start(std::string *error) {
  llama_context_params cp = llama_context_default_params();
  int32_t hw = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  cp.n_ctx = cfg_.contextSize;
  cp.n_batch = cfg_.batchSize;
  cp.n_ubatch = std::min(cfg_.microBatchSize, cfg_.batchSize);
  cp.n_seq_max = cfg_.sequences;
  cp.n_threads = cfg_.threads > 0 ? cfg_.threads : hw;
  cp.n_threads_batch = cfg_.batchThreads > 0 ? cfg_.batchThreads : cp.n_threads;
  cp.kv_unified = cfg_.unifiedKv;
  cp.swa_full = cfg_.swaFull;
  cp.flash_attn_type = static_cast<llama_flash_attn_type>(cfg_.flashAttention);
  if (cfg_.kvTypeK >= 0) cp.type_k = static_cast<ggml_type>(cfg_.kvTypeK);
  if (cfg_.kvTypeV >= 0) cp.type_v = static_cast<ggml_type>(cfg_.kvTypeV);
  cp.no_perf = true;
  // Speculation on a recurrent/hybrid memory: llama.cpp keeps a snapshot of the recurrent state
  // after each of the last decode's trailing tokens, so the rejected draft cells can be rolled
  // back (architectures that support it; llama_n_rs_seq says 0 otherwise). Each snapshot is a
  // copy of the sequence's recurrent state: drafts on such models stop at kMaxRollback tokens.
  const bool partialMemory = llama_model_is_recurrent(model_) || llama_model_is_hybrid(model_);
  if (cfg_.spec.mode != 0 && partialMemory) cp.n_rs_seq = std::min<uint32_t>(cfg_.spec.draftMax, kMaxRollback);
  cp.abort_callback = &Scheduler::AbortCallback;
  cp.abort_callback_data = this;
  try {
    ctx_ = llama_init_from_model(model_, cp);
  } catch (const std::exception &e) {
    *error = e.what();
    ctx_ = nullptr;
    return false;
  }
  if (ctx_ == nullptr) {
    *error = "llama.cpp could not create the context (not enough memory for this context size, or unsupported settings)";
    return false;
  }
  {
    std::string why;
    // without pools, ggml's default (threads made per graph) still works, only slower; deterministic
    // mode is set on the pools, so it needs them
    if (!pools_.Attach(ctx_, cp.n_threads, cp.n_threads_batch, cfg_.deterministic, &why) && cfg_.deterministic) {
      pools_.Detach(ctx_);
      llama_free(ctx_);
      ctx_ = nullptr;
      *error = "deterministic: " + why;
      return false;
    }
  }
  encoderOnly_ = llama_get_memory(ctx_) == nullptr;
  embedder_ = std::make_unique<Embedder>(
      model_, std::max<uint32_t>(cfg_.batchSize, 1), cp.n_threads, cp.n_threads_batch, &Scheduler::AbortCallback, this,
      [this](llama_context *c) { pools_.Share(c); }, [this](llama_context *c) { pools_.Detach(c); },
      [this](Event &&ev) { output_.Emit(std::move(ev)); });
  cfg_.batchSize = llama_n_batch(ctx_);
  cfg_.microBatchSize = llama_n_ubatch(ctx_);
  cfg_.sequences = llama_n_seq_max(ctx_);
  sequenceContextSize_ = llama_n_ctx_seq(ctx_);
  uint32_t tickBudget = cfg_.prefillChunk > 0 ? std::min(cfg_.prefillChunk, cfg_.batchSize) : cfg_.batchSize;
  batch_ = std::make_unique<Batch>(ctx_, cfg_.batchSize, tickBudget);
  // Recurrent and hybrid memories cannot drop a tail of a sequence: they reuse whole states and
  // checkpoints (Sequence). A sliding-window cache without swa_full forgets what falls out of
  // the window: whole states only (no checkpoints: a sequence extends, or is recomputed).
  bool swaLimited = !cfg_.swaFull && llama_model_n_swa(model_) > 0;
  canTruncate_ = !partialMemory && !swaLimited;
  rollback_ = partialMemory && !swaLimited ? llama_n_rs_seq(ctx_) : 0;
  // Speculative decoding drops rejected draft cells from a sequence's tail: only memories that
  // can do that speculate (a recurrent state rolls back to llama.cpp's per-token snapshots).
  const bool canDropDrafts = canTruncate_ || rollback_ > 0;
  if (cfg_.spec.mode == 2 && canDropDrafts) {
    draft_ = std::make_unique<DraftModel>();
    std::string why;
    if (!draft_->Start(cfg_.spec.draftModel, model_, cfg_.contextSize, cfg_.sequences, cp.n_threads, &why)) {
      draft_.reset();
      batch_.reset();
      pools_.Detach(ctx_);
      llama_free(ctx_);
      ctx_ = nullptr;
      *error = "speculative draft model: " + why;
      return false;
    }
  }
  if (cfg_.spec.mode == 3 && canDropDrafts) {
    // The trunk's h rows are read by batch row: llama.cpp keeps a batch's order only with one
    // KV stream (a unified KV).
    std::string why = cfg_.unifiedKv ? "" : "it needs a unified KV (unifiedKv true)";
    if (why.empty()) {
      mtp_ = std::make_unique<MtpDraft>();
      if (!mtp_->Start(model_, ctx_, cfg_.contextSize, cfg_.sequences, &pools_, &why)) mtp_.reset();
    }
    if (!mtp_) {
      batch_.reset();
      pools_.Detach(ctx_);
      llama_free(ctx_);
      ctx_ = nullptr;
      *error = "speculative mtp: " + why;
      return false;
    }
    if (cfg_.spec.draftCost <= 0) cfg_.spec.draftCost = mtp_->StepCost();
  }
  if (cfg_.spec.mode != 0) {
    spec_.on = canDropDrafts && cfg_.spec.draftMax > 0;
    if (!canDropDrafts) {
      spec_.off = swaLimited ? "a window-only sliding-window cache (swaFull false) cannot drop rejected draft tokens"
                             : "this recurrent or hybrid architecture has no rollback snapshots in llama.cpp (its state has no per-token history)";
    }
  }
  sequences_.reserve(cfg_.sequences);
  for (uint32_t i = 0; i < cfg_.sequences; i++) {
    sequences_.emplace_back(ctx_, static_cast<int32_t>(i));
    sequences_.back().SetMaxCheckpoints(cfg_.prefixCache ? cfg_.checkpoints : 0);
    sequences_.back().SetDraftRollback(rollback_ > 0);
  }
  std::unique_ptr<RamTier> ram;
  std::unique_ptr<DiskTier> disk;
  if (cfg_.cacheRamBytes > 0 && cfg_.prefixCache) ram = std::make_unique<RamTier>(cfg_.cacheRamBytes);
  counters_.ramBudget = cfg_.cacheRamBytes;
  counters_.kvCellsTotal = llama_n_ctx(ctx_);
  // The context's layout key: which saved states (disk tier files) and warmed prefixes (JS
  // prefix keys, reported in the ready event) are valid here: same weights, same KV layout.
  // (a window-only sliding-window cache has another layout: its own key)
  const std::string fp = LayoutKey(cfg_.modelFingerprint + (swaLimited ? "|swa-window" : ""), cp.type_k, cp.type_v, cfg_.unifiedKv,
                                   static_cast<int32_t>(llama_n_ctx_seq(ctx_)), cfg_.flashAttention);
  if (!cfg_.cacheDir.empty() && cfg_.prefixCache) {
    disk = std::make_unique<DiskTier>(cfg_.cacheDir + "/" + fp.substr(0, 16), fp, cfg_.cacheDiskBytes);
    disk->Load();
    counters_.diskBudget = cfg_.cacheDiskBytes;
  }
  tiers_ = std::make_unique<StateTiers>(std::move(ram), std::move(disk));
  sessions_ = Sessions({&sequences_, tiers_.get(), &counters_, &output_, cfg_.sessionTtlMs, sequenceContextSize_});
  reuse_ = Reuse({cfg_.prefixCache, cfg_.unifiedKv, canTruncate_, &sequences_, tiers_.get(), &counters_});
  UpdateCounters();  // stats count the entries loaded from disk before any request

  Event ev;
  ev.type = EventType::Ready;
  ev.ready.contextSize = llama_n_ctx(ctx_);
  ev.ready.sequenceContextSize = sequenceContextSize_;
  ev.ready.batchSize = cfg_.batchSize;
  ev.ready.microBatchSize = cfg_.microBatchSize;
  ev.ready.sequences = cfg_.sequences;
  ev.ready.threads = llama_n_threads(ctx_);
  ev.ready.batchThreads = llama_n_threads_batch(ctx_);
  ev.ready.unifiedKv = cfg_.unifiedKv;
  ev.ready.flashAttention = cfg_.flashAttention;
  ev.ready.layoutKey = fp;
  ev.ready.kvTypeK = static_cast<int32_t>(cp.type_k);
  ev.ready.kvTypeV = static_cast<int32_t>(cp.type_v);
  ev.ready.canTruncateKv = canTruncate_;
  ev.ready.speculative = !spec_.on ? "off" : cfg_.spec.mode == 3 ? "mtp" : cfg_.spec.mode == 2 ? "draft" : "ngram";
  ev.ready.speculativeOff = spec_.off;
  output_.Emit(std::move(ev));
  output_.FlushEvents(active_, true);
  return true;
}

// ---- JS thread -----------------------------------------------------------------------

void Scheduler::SubmitEmbed(std::unique_ptr<EmbedJob> job) {
  std::lock_guard<std::mutex> lk(mu_);
  embedSubmitted_.push_back(std::move(job));
  cv_.notify_one();
}

bool Scheduler::Submit(std::unique_ptr<RequestParams> params) {
  std::lock_guard<std::mutex> lk(mu_);
  if (waitingCount_ >= cfg_.maxQueued + cfg_.sequences) return false;
  waitingCount_++;
  submitted_.push_back(std::move(params));
  cv_.notify_one();
  return true;
}

void Scheduler::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  cancels_.push_back(id);
  if (std::find(inBatch_.begin(), inBatch_.end(), id) != inBatch_.end()) abortNow_.store(true);
  cv_.notify_one();
}

void Scheduler::SetPaused(uint64_t id, bool paused) {
  std::lock_guard<std::mutex> lk(mu_);
  pauses_.emplace_back(id, paused);
  cv_.notify_one();
}

void Scheduler::Close() {
  std::lock_guard<std::mutex> lk(mu_);
  closing_ = true;
  abortNow_.store(true);
  cv_.notify_one();
}

// ---- engine thread ---------------------------------------------------------------------

void Scheduler::UpdateCounters() {
  if (ctx_ != nullptr) counters_.kvCellsUsed = KvCellsUsed(ctx_, cfg_.sequences, cfg_.unifiedKv);
  RamTier *ram = tiers_ ? tiers_->Ram() : nullptr;
  DiskTier *disk = tiers_ ? tiers_->Disk() : nullptr;
  counters_.ramBytes = ram ? ram->Bytes() : 0;
  counters_.ramEntries = ram ? ram->Count() : 0;
  counters_.ramEvictions = ram ? ram->Evictions() : 0;
  counters_.sessions = sessions_.Size();
  if (disk) {
    counters_.diskBytes = disk->Bytes();
    counters_.diskEntries = disk->Count();
    counters_.diskRejected = disk->Rejected();
  }
  counters_.pinned = sessions_.PinnedCount();
  counters_.restores = tiers_ ? tiers_->restores : 0;
  uint64_t n = 0, bytes = 0;
  for (const auto &s : sequences_) {
    n += s.Checkpoints().size();
    bytes += s.CheckpointBytes();
  }
  counters_.checkpoints = n;
  counters_.checkpointBytes = bytes;
}

bool Scheduler::Admit() {
  bool progressed = false;
  if (sessions_.Expire() > 0) UpdateCounters();
  if (DiskTier *disk = tiers_->Disk()) {
    for (auto &res : disk->Poll()) {
      for (auto &w : waiting_) {
        if (w->p->id != res.requestId) continue;
        w->disk.pending = false;
        w->disk.ready = res.ok;
        if (res.ok) w->disk.blob = std::move(res.blob);
        else w->disk.tokens.clear();
      }
    }
    UpdateCounters();
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (HeldBack(**it)) break;  // a preempted request keeps its place at the head
    Placement pl = TryAdmit(**it);
    if (pl == Placement::Wait) {
      // A request waiting for its own busy session must not block the others.
      const RequestParams &p = *(*it)->p;
      bool sessionWait = ((*it)->disk.pending) || (p.waitForSession && !p.sessionId.empty());
      if (!sessionWait) {
        bool anyFree = false;
        for (auto &s : sequences_) anyFree = anyFree || (s.req == nullptr);
        if (!anyFree) break;
      }
      ++it;
      continue;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      waitingCount_--;
    }
    progressed = true;
    if (pl == Placement::Placed) {
      std::unique_ptr<Request> rp = std::move(*it);
      Request &r = *rp;
      active_.push_back(std::move(rp));
      if (r.p->prefillOnly && r.nPast == r.tokens.size()) Finish(r, FinishReason::Prefill);
    }
    it = waiting_.erase(it);
  }
  return progressed;
}

void Scheduler::FailBatch(ErrorCode code, const std::string &message) {
  for (Request *r : batch_->Members()) {
    if (!r->done) Fail(*r, code, message);
  }
}

void Scheduler::DecodeBatch() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    inBatch_.clear();
    for (Request *r : batch_->Members()) inBatch_.push_back(r->p->id);
    for (uint64_t id : cancels_) {
      if (std::find(inBatch_.begin(), inBatch_.end(), id) != inBatch_.end()) abortNow_.store(true);
    }
    if (closing_) abortNow_.store(true);
  }
  int32_t ret = batch_->Decode();
  {
    std::lock_guard<std::mutex> lk(mu_);
    inBatch_.clear();
  }
  Clock::time_point now = Clock::now();
  if (ret == 0) {
    batch_->Commit();  // every member's fed tokens are in its sequence's KV
    for (Request *rp : batch_->Members()) {
      Request &r = *rp;
      if (r.nGenerated == 0 && r.nPast == r.nPrompt) {
        r.stats.prefilledTokens = static_cast<int32_t>(r.nPrompt) - r.stats.reusedTokens;
        r.stats.prefillMs = MsBetween(r.time.prefillStart, now);
        if (r.p->prefillOnly) {
          Finish(r, FinishReason::Prefill);
          continue;
        }
      }
      if (r.tick.logitIdx < 0) continue;
      if (r.spec.draft.empty()) {
        TokenStep st = NextToken(r, r.tick.logitIdx);
        if (st.kind != TokenStep::Kind::Continue) EndStep(r, st);
      } else {
        VerifyDraft(r);
      }
    }
    if (mtp_) mtp_->Observe(batch_->Raw(), batch_->Members());
    return;
  }
  if (ret == 2) {
    batch_->KeepComputed();
    return;
  }
  if (ret == 1 && batch_->HasDrafts()) {
    // No room for the drafts: the next tick decodes without any before anything steps back
    // (llama.cpp refused the whole batch before computing anything).
    spec_.noDraftTick = true;
    return;
  }
  if (ret == 1) {
    // No room in the KV cache: idle KV goes first, then one request steps back (preemption.cc).
    OnKvFull();
    return;
  }
  FailBatch(ErrorCode::DecodeFailed, "llama_decode failed with code " + std::to_string(ret));
}

void Scheduler::Finish(Request &r, FinishReason reason) {
  if (r.done) return;
  output_.Finish(r, reason);
  Release(r, true);  // eog | stop | length | prefill: the KV holds what was committed
}

void Scheduler::Fail(Request &r, ErrorCode code, const std::string &message) {
  if (r.done) return;
  output_.Fail(r, code, message);
  Release(r, false);
}

void Scheduler::Release(Request &r, bool keepKv) {
  Sequence *s = r.seq;
  if (s == nullptr) return;
  finished_++;
  bool pinned = s->Pinned();
  // The sequence's token list already mirrors its KV (tokens below nPast). A pinned
  // session keeps that KV even after an abort; otherwise a failed request's KV goes.
  if (!keepKv && !pinned) s->Clear();
  // a turn boundary: the end of a request (recurrent/hybrid memories; no-op otherwise)
  if (keepKv || pinned) s->TakeCheckpoint();
  s->lastUsed = Clock::now();
  if (pinned) sessions_.Leave(r, *s, keepKv);
  if (r.p->prefillOnly && keepKv && !pinned) {
    s->Save(*tiers_, "");  // a warmed prefix survives reuse
  } else if (keepKv && cfg_.diskWriteThrough && tiers_->Disk() != nullptr) {
    s->diskDirty = true;  // copied out when the engine idles (WriteDirtyStates), never mid-decode
  }
  s->req = nullptr;
  r.seq = nullptr;
  UpdateCounters();
}

void Scheduler::Run() {
  bool progressed = false;  // the last Admit() placed or ended a request
  while (true) {
    bool runnable = false;
    for (auto &rp : active_) {
      if (!rp->done && !rp->paused) runnable = true;
    }
    runnable = runnable || embedder_->Pending();
    poolsAwake_ = poolsAwake_ || runnable;  // graphs to compute: the pools poll after them
    bool diskWaits = false;
    for (auto &w : waiting_) diskWaits = diskWaits || w->disk.pending;
    // Block only when nothing can move without a command: no decode to run, and the last
    // admission round could place nothing (e.g. requests waiting for a busy session).
    if (diskWaits && !runnable) std::this_thread::sleep_for(std::chrono::microseconds(200));
    bool idle = !runnable && !progressed && !diskWaits;
    if (idle || !runnable) output_.FlushEvents(active_, true);
    if (!runnable) WriteDirtyStates();
    DrainCommands(idle);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (closing_) break;
    }
    try {
      progressed = Admit();
      SpillTaxingIdleKv();
      PlanDrafts();
      if (batch_->Build(active_)) {
        Clock::time_point t0 = Clock::now();
        DecodeBatch();
        embedder_->OnGenerationTick(MsBetween(t0, Clock::now()));
      }
      // One embedding batch beside each generation batch; while requests decode it takes the
      // prompt-chunk budget (prefillChunk), as a prompt would.
      bool decoding = false;
      for (auto &rp : active_) decoding = decoding || (!rp->done && !rp->paused);
      {
        // an abort meant for a generation request of the decode above must not stop this batch
        std::lock_guard<std::mutex> lk(mu_);
        if (!closing_) abortNow_.store(false);
      }
      embedder_->Step(decoding && cfg_.prefillChunk > 0 ? cfg_.prefillChunk : cfg_.batchSize, decoding);
    } catch (const std::exception &e) {
      // A C++ exception must never leave the engine thread: fail what was running, go on.
      for (auto &rp : active_) {
        if (!rp->done) Fail(*rp, ErrorCode::Internal, std::string("Internal engine error: ") + e.what());
      }
      embedder_->FailAll(ErrorCode::Internal, std::string("Internal engine error: ") + e.what());
      progressed = true;
    }
    output_.FlushEvents(active_, false);
    RequeuePreempted();
    counters_.kvCellsUsed = KvCellsUsed(ctx_, cfg_.sequences, cfg_.unifiedKv);
    // A finished request frees its sequence (and maybe a session someone waits for).
    for (auto &rp : active_) progressed = progressed || rp->done;
    active_.erase(std::remove_if(active_.begin(), active_.end(), [](const std::unique_ptr<Request> &r) { return r->done; }),
                  active_.end());
  }
  Shutdown();
}

// Write-through (cacheWriteThrough): the state copy-out takes the engine thread (about 0.5 s
// for a 2,000-token state of the 250 M bench model), so it runs only while nothing decodes,
// for sequences idle for kWriteThroughGraceMs, one at a time, stopping when a command arrives. The write itself is on the
// disk tier's I/O thread. Under continuous load a turn reaches disk at the next idle moment.
void Scheduler::WriteDirtyStates() {
  Clock::time_point now = Clock::now();
  for (auto &s : sequences_) {
    // the grace period: a conversation's next turn that comes at once does not wait for a copy
    if (!s.diskDirty || s.req != nullptr || MsBetween(s.lastUsed, now) < kWriteThroughGraceMs) continue;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (closing_ || !submitted_.empty() || !cancels_.empty()) return;
    }
    s.diskDirty = false;
    tiers_->SaveToDisk(s);
  }
}

void Scheduler::Shutdown() {
  // Closing: every request still here ends with DISPOSED.
  for (auto &rp : active_) {
    if (!rp->done) Fail(*rp, ErrorCode::Disposed, "The context was disposed while the request was running");
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto &p : submitted_) {
      auto r = std::make_unique<Request>();
      r->p = std::move(p);
      waiting_.push_back(std::move(r));
    }
    submitted_.clear();
    for (auto &j : embedSubmitted_) embedder_->Add(std::move(j));
    embedSubmitted_.clear();
  }
  embedder_->FailAll(ErrorCode::Disposed, "The context was disposed before the embedding finished");
  for (auto &rp : waiting_) {
    const char *what = "The context was disposed before the request started";
    output_.Emit(rp->p->command ? Event::SessionFailed(rp->p->id, ErrorCode::Disposed, what)
                                : Event::Failed(rp->p->id, ErrorCode::Disposed, what, rp->stats));
  }
  waiting_.clear();
  output_.FlushEvents(active_, true);
  active_.clear();
  embedder_.reset();
  // With a disk tier, what the sequences hold survives the restart (written before the
  // I/O thread is joined below). Not with KV on RPC servers: reading it back could wait on
  // a dead server.
  if (!cfg_.rpc) tiers_->SaveAllToDisk(sequences_, 16);
  draft_.reset();
  mtp_.reset();
  batch_.reset();
  tiers_.reset();  // finishes queued disk writes, then joins the I/O thread
  pools_.Detach(ctx_);
  if (ctx_ != nullptr) FreeContext();
  ctx_ = nullptr;
}

}  // namespace llamux
