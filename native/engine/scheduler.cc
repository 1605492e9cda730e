#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "engine/admission.h"
#include "engine/idle_kv.h"
#include "engine/intake.h"
#include "engine/lifecycle.h"
#include "engine/preemption.h"
#include "engine/token_step.h"
#include "kv/prefix_retention.h"
#include "speculative/speculation.h"

namespace llamux {

namespace {

bool AnyRunning(const std::vector<std::unique_ptr<Request>> &active) {
  return std::any_of(active.begin(), active.end(), [](const auto &r) { return r->Running(); });
}


}  // namespace

Scheduler::Scheduler(llama_model *model, ContextConfig cfg, Flush flush)
    : model_(model), cfg_(std::move(cfg)), output_(llama_model_get_vocab(model), &cfg_.markers, std::move(flush)) {}

Scheduler::~Scheduler() {
  embedder_.reset();
  if (spec_) spec_->Stop();
  batch_.reset();
  tiers_.reset();
  pools_.Detach(ctx_);
  FreeContext(ctx_, cfg_.rpc);
}

bool Scheduler::Submit(std::unique_ptr<RequestParams> params) {
  return queue_.Submit(std::move(params), cfg_.maxQueued + cfg_.sequences);
}

bool Scheduler::Start(std::string *error) {
  const llama_context_params cp = ContextParams(cfg_, model_, &CommandQueue::AbortCallback, &queue_);
  try {
    ctx_ = InitContext(model_, cp);  // under the adapter lock (model/adapter.h)
  } catch (const std::exception &e) {
    *error = e.what();
    ctx_ = nullptr;
    return false;
  }
  if (ctx_ == nullptr) {
    *error = "llama.cpp could not create the context (not enough memory for this context size, or unsupported settings)";
    return false;
  }
  // Every failure below frees what was made, the context through the RPC guard.
  auto fail = [&](const std::string &why) {
    embedder_.reset();
    if (spec_) spec_->Stop();
    batch_.reset();
    pools_.Detach(ctx_);
    FreeContext(ctx_, cfg_.rpc);
    ctx_ = nullptr;
    *error = why;
    return false;
  };
  std::string why;
  // without pools, ggml's default (threads made per graph) still works, only slower; deterministic
  // mode is set on the pools, so it needs them
  if (!pools_.Attach(ctx_, cp.n_threads, cp.n_threads_batch, cfg_.deterministic, &why) && cfg_.deterministic) {
    return fail("deterministic: " + why);
  }
  const bool encoderOnly = llama_get_memory(ctx_) == nullptr;
  embedder_ = std::make_unique<Embedder>(
      model_, std::max<uint32_t>(cfg_.batchSize, 1), cp.n_threads, cp.n_threads_batch, &CommandQueue::AbortCallback, &queue_,
      [this](llama_context *c) { pools_.Share(c); }, [this](llama_context *c) { pools_.Detach(c); },
      [this](Event &&ev) { output_.Emit(std::move(ev)); });
  cfg_.batchSize = llama_n_batch(ctx_);
  cfg_.microBatchSize = llama_n_ubatch(ctx_);
  cfg_.sequences = llama_n_seq_max(ctx_);
  const uint32_t nCtxSeq = llama_n_ctx_seq(ctx_);
  uint32_t tickBudget = cfg_.prefillChunk > 0 ? std::min(cfg_.prefillChunk, cfg_.batchSize) : cfg_.batchSize;
  batch_ = std::make_unique<Batch>(ctx_, cfg_.batchSize, tickBudget, nCtxSeq);
  const MemoryTraits mem = ProbeMemory(model_, ctx_, cfg_);
  spec_ = std::make_unique<Speculation>(cfg_.spec);
  if (!spec_->Start({model_, ctx_, &pools_, cfg_.contextSize, cfg_.sequences, nCtxSeq, cp.n_threads, cfg_.unifiedKv,
                     mem.canTruncate, mem.rollback, mem.swaLimited, &counters_},
                    &why)) {
    return fail(why);
  }

  sequences_.reserve(cfg_.sequences);
  for (uint32_t i = 0; i < cfg_.sequences; i++) {
    sequences_.emplace_back(ctx_, static_cast<int32_t>(i));
    sequences_.back().SetMaxCheckpoints(cfg_.prefixCache ? cfg_.checkpoints : 0);
    sequences_.back().SetDraftRollback(mem.rollback > 0);
  }
  const std::string layoutKey = ContextLayoutKey(cfg_, ctx_, cp, mem);
  std::unique_ptr<RamTier> ram;
  std::unique_ptr<DiskTier> disk;
  if (cfg_.cacheRamBytes > 0 && cfg_.prefixCache) ram = std::make_unique<RamTier>(cfg_.cacheRamBytes);
  counters_.ramBudget = cfg_.cacheRamBytes;
  counters_.kvCellsTotal = llama_n_ctx(ctx_);
  if (!cfg_.cacheDir.empty() && cfg_.prefixCache) {
    disk = std::make_unique<DiskTier>(cfg_.cacheDir + "/" + layoutKey.substr(0, 16), layoutKey, cfg_.cacheDiskBytes);
    disk->Load();
    counters_.diskBudget = cfg_.cacheDiskBytes;
  }
  tiers_ = std::make_unique<StateTiers>(std::move(ram), std::move(disk));

  // ---- the parts ------------------------------------------------------------------------
  sessions_ = Sessions({&sequences_, tiers_.get(), &counters_, &output_, cfg_.sessionTtlMs, nCtxSeq});
  reuse_ = Reuse({cfg_.prefixCache, cfg_.unifiedKv, mem.canTruncate, &sequences_, tiers_.get(), &counters_});
  gauges_.SetSources({ctx_, cfg_.sequences, cfg_.unifiedKv, &sequences_, tiers_.get(), &sessions_});
  life_ = std::make_unique<Lifecycle>(Lifecycle::Deps{&output_, &sessions_, tiers_.get(), &gauges_, &counters_, cfg_.diskWriteThrough});
  intake_ = std::make_unique<Intake>(Intake::Settings{llama_model_get_vocab(model_), &cfg_.markers, nCtxSeq, encoderOnly});
  admission_ = std::make_unique<Admission>(Admission::Deps{&sequences_, &sessions_, &reuse_, tiers_.get(), life_.get(), &queue_,
                                                           &output_, &gauges_, cfg_.prefixCache, mem.canTruncate});
  steps_ = std::make_unique<TokenStepper>(ctx_, llama_model_get_vocab(model_), &output_, life_.get(), nCtxSeq);
  idleKv_ = std::make_unique<IdleKv>(
      IdleKv::Deps{&sequences_, &sessions_, tiers_.get(), &gauges_, &counters_, cfg_.idleKvSpillMs, cfg_.unifiedKv});
  if (cfg_.projector) media_ = std::make_unique<media::MediaStep>(ctx_, cfg_.projector, &queue_, life_.get(), &pools_, static_cast<int32_t>(cfg_.batchSize));
  gauges_.Update();  // stats count the entries loaded from disk before any request

  output_.Emit(ReadyEvent(ctx_, cfg_, cp, mem, layoutKey, spec_->ModeName(), spec_->OffReason()));
  output_.FlushEvents(active_, true);
  return true;
}

void Scheduler::Run() {
  bool progressed = false;  // the last tick placed or ended a request
  while (true) {
    const bool runnable = AnyRunning(active_) || embedder_->Pending();
    poolsAwake_ = poolsAwake_ || runnable;  // graphs to compute: the pools poll after them
    const bool diskWaits = admission_->DiskWaits();
    if (diskWaits && !runnable) std::this_thread::sleep_for(std::chrono::microseconds(200));
    // Block only when nothing can move without a command: no decode to run, and the last
    // admission round could place nothing (e.g. requests waiting for a busy session).
    const bool idle = !runnable && !progressed && !diskWaits;
    if (idle || !runnable) output_.FlushEvents(active_, true);
    if (!runnable) idleKv_->WriteDirty(queue_);
    Drain(idle);
    if (queue_.Closing()) break;
    try {
      progressed = Tick();
    } catch (const std::exception &e) {
      // A C++ exception must never leave the engine thread: fail what was running, go on.
      const std::string msg = std::string("Internal engine error: ") + e.what();
      for (auto &rp : active_) life_->Fail(*rp, ErrorCode::Internal, msg);
      embedder_->FailAll(ErrorCode::Internal, msg);
      progressed = true;
    }
    output_.FlushEvents(active_, false);
    admission_->Requeue(active_);
    gauges_.UpdateKvCells();
    // A finished request frees its sequence (and maybe a session someone waits for).
    progressed = progressed || std::any_of(active_.begin(), active_.end(), [](const auto &r) { return r->Done(); });
    active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto &r) { return r->Done(); }), active_.end());
  }
  Shutdown();
}

bool Scheduler::Tick() {
  const bool progressed = admission_->Admit(active_);
  idleKv_->SpillTaxing(active_);
  // one media run encoded and decoded (a request's prompt reached an image); no room: as below
  if (media_ && media_->Step(active_) == media::MediaStep::Result::NoRoom) OnKvFull(sequences_, active_, *life_);
  spec_->Plan(active_);
  if (batch_->Build(active_)) {
    const Clock::time_point t0 = Clock::now();
    Decode();
    embedder_->OnGenerationTick(MsBetween(t0, Clock::now()));
  }
  // One embedding batch beside each generation batch; while requests decode it takes the
  // prompt-chunk budget (prefillChunk), as a prompt would. An abort meant for a generation
  // request of the decode above must not stop it.
  const bool decoding = AnyRunning(active_);
  queue_.ClearAbort();
  embedder_->Step(decoding && cfg_.prefillChunk > 0 ? cfg_.prefillChunk : cfg_.batchSize, decoding);
  return progressed;
}

void Scheduler::Decode() {
  const std::vector<Request *> &members = batch_->Members();
  std::vector<uint64_t> ids;
  ids.reserve(members.size());
  for (Request *r : members) ids.push_back(r->p->id);
  queue_.DecodeStarts(ids);
  const int32_t ret = batch_->Decode();
  queue_.DecodeEnded();
  if (ret == 0) {
    batch_->Commit();  // every member's fed tokens are in its sequence's KV
    PrefixRetention retention(tiers_.get());
    for (Request *rp : members) retention.Committed(*rp);
    const Clock::time_point now = Clock::now();
    for (Request *rp : members) {
      Request &r = *rp;
      if (r.p->progress && r.nGenerated == 0) output_.Progress(r, now);
      if (r.nGenerated == 0 && r.nPast == r.nPrompt) {
        r.stats.prefilledTokens = static_cast<int32_t>(r.nPrompt) - r.stats.reusedTokens;
        r.stats.prefillMs = MsBetween(r.time.prefillStart, now);
        if (r.p->prefillOnly) {
          life_->Finish(r, FinishReason::Prefill);
          continue;
        }
      }
      if (r.tick.logitIdx < 0) continue;
      if (r.spec.draft.empty()) steps_->Step(r, r.tick.logitIdx);
      else spec_->Verify(r, *steps_);
    }
    spec_->Committed(batch_->Raw(), members);
  } else if (ret == 2) {
    batch_->KeepComputed();  // aborted: finished ubatches stay
  } else if (ret == 1 && batch_->HasDrafts()) {
    // No room for the drafts: the next tick decodes without any before anything steps back
    // (llama.cpp refused the whole batch before computing anything).
    spec_->NoRoomForDrafts();
  } else if (ret == 1) {
    // No room in the KV cache: idle KV goes first, then one request steps back (preemption.h).
    OnKvFull(sequences_, active_, *life_);
  } else {
    for (Request *r : members) life_->Fail(*r, ErrorCode::DecodeFailed, "llama_decode failed with code " + std::to_string(ret));
  }
}

void Scheduler::Drain(bool wait) {
  if (wait) {
    // The CPU pools' workers poll for the next graph for a while before they sleep: a request
    // that follows at once finds them awake, but an idle spell must not keep them spinning on
    // cores that another context (or process) computes on. A short wait first, then they sleep.
    if (poolsAwake_ && !queue_.Wait(std::chrono::milliseconds(kPoolsPauseMs))) {
      pools_.Pause();
      poolsAwake_ = false;
    }
    // Idle sessions must expire on time even when no request comes (wake once a second),
    // and write-through states wait for a quiet moment (wake after the grace period).
    if (queue_.Ready()) {
      // a command came during the short wait
    } else if (idleKv_->AnyDirty()) {
      queue_.Wait(std::chrono::milliseconds(static_cast<int64_t>(IdleKv::kWriteThroughGraceMs) + 10));
    } else if (sessions_.Size() > 0) {
      queue_.Wait(std::chrono::seconds(1));
    } else {
      queue_.Wait(std::chrono::milliseconds(-1));
    }
  }
  CommandQueue::Commands c = queue_.Take();
  for (auto &params : c.submitted) {
    if (auto r = intake_->Accept(std::move(params), output_)) admission_->Add(std::move(r));
    else queue_.Left();
  }
  for (auto &job : c.embeds) embedder_->Add(std::move(job));
  for (uint64_t id : c.cancels) {
    admission_->Cancel(id);
    embedder_->Cancel(id);
    for (auto &rp : active_) {
      if (rp->p->id == id) life_->Fail(*rp, ErrorCode::Aborted, "The request was aborted");
    }
  }
  for (auto &pp : c.pauses) {
    for (auto &rp : active_) {
      if (rp->p->id == pp.first) life_->SetPaused(*rp, pp.second);
    }
  }
}

void Scheduler::Shutdown() {
  // Closing: every request still here ends with DISPOSED.
  for (auto &rp : active_) life_->Fail(*rp, ErrorCode::Disposed, "The context was disposed while the request was running");
  CommandQueue::Commands c = queue_.TakeAll();
  for (auto &p : c.submitted) {
    auto r = std::make_unique<Request>();
    r->p = std::move(p);
    admission_->Add(std::move(r));
  }
  for (auto &j : c.embeds) embedder_->Add(std::move(j));
  embedder_->FailAll(ErrorCode::Disposed, "The context was disposed before the embedding finished");
  admission_->FailAll(ErrorCode::Disposed, "The context was disposed before the request started");
  output_.FlushEvents(active_, true);
  active_.clear();
  embedder_.reset();
  // With a disk tier, what the sequences hold survives the restart (written before the
  // I/O thread is joined below). Not with KV on RPC servers: reading it back could wait on
  // a dead server.
  if (!cfg_.rpc) tiers_->SaveAllToDisk(sequences_, 16);
  spec_->Stop();
  batch_.reset();
  tiers_.reset();  // finishes queued disk writes, then joins the I/O thread
  pools_.Detach(ctx_);
  FreeContext(ctx_, cfg_.rpc);
  ctx_ = nullptr;
}

}  // namespace llamux
