#include "scheduler.h"

#include <algorithm>
#include <thread>

#include "hash.h"
#include "kv_cells.h"

namespace llamux {

namespace {
double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

struct Scheduler::Request {
  std::unique_ptr<RequestParams> p;
  Slot *slot = nullptr;
  std::vector<llama_token> tokens;  // prompt, then every sampled token that was fed
  size_t nPast = 0;                 // tokens[0, nPast) are in the KV
  size_t nPrompt = 0;
  int32_t nGenerated = 0;
  bool paused = false;
  bool done = false;
  Sampler sampler;
  std::unique_ptr<TextStream> text;
  std::string pendingText;
  std::vector<int32_t> pendingTokens;
  // Tool-call spans (only with markers).
  std::unique_ptr<MarkerMatcher> matcher;
  std::unique_ptr<TextStream> spanStream;
  bool spanOpen = false;
  int32_t spanIndex = 0;
  std::vector<int32_t> spanTokens;
  std::string spanText;
  std::string pendingSpan;
  // This tick's share of the batch.
  size_t batchCount = 0;
  int32_t logitIdx = -1;
  Clock::time_point tSubmit, tAdmit, tPrefillStart, tFirstToken, tLast;
  bool prefillStarted = false;
  FinalStats stats;
  // Disk-tier restore in flight (the request waits without holding a sequence).
  bool diskPending = false;
  bool diskReady = false;
  std::vector<llama_token> diskTokens;
  std::vector<uint8_t> diskBlob;
};

Scheduler::Scheduler(llama_model *model, EngineConfig cfg, Flush flush)
    : model_(model), vocab_(llama_model_get_vocab(model)), cfg_(cfg), flush_(std::move(flush)) {
  nVocab_ = llama_vocab_n_tokens(vocab_);
}

Scheduler::~Scheduler() {
  if (batch_.token != nullptr) llama_batch_free(batch_);
  if (ctx_ != nullptr) llama_free(ctx_);
}

bool Scheduler::AbortCallback(void *data) {
  return static_cast<Scheduler *>(data)->abortNow_.load(std::memory_order_relaxed);
}

bool Scheduler::Start(std::string *error) {
  llama_context_params cp = llama_context_default_params();
  int32_t hw = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  cp.n_ctx = cfg_.nCtx;
  cp.n_batch = cfg_.nBatch;
  cp.n_ubatch = std::min(cfg_.nUbatch, cfg_.nBatch);
  cp.n_seq_max = cfg_.nSeqMax;
  cp.n_threads = cfg_.nThreads > 0 ? cfg_.nThreads : hw;
  cp.n_threads_batch = cfg_.nThreadsBatch > 0 ? cfg_.nThreadsBatch : cp.n_threads;
  cp.kv_unified = cfg_.kvUnified;
  cp.flash_attn_type = static_cast<llama_flash_attn_type>(cfg_.flashAttn);
  if (cfg_.typeK >= 0) cp.type_k = static_cast<ggml_type>(cfg_.typeK);
  if (cfg_.typeV >= 0) cp.type_v = static_cast<ggml_type>(cfg_.typeV);
  cp.no_perf = true;
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
  mem_ = llama_get_memory(ctx_);
  cfg_.nBatch = llama_n_batch(ctx_);
  cfg_.nUbatch = llama_n_ubatch(ctx_);
  cfg_.nSeqMax = llama_n_seq_max(ctx_);
  batch_ = llama_batch_init(static_cast<int32_t>(cfg_.nBatch), 0, 1);
  nCtxSeq_ = llama_n_ctx_seq(ctx_);
  tickBudget_ = cfg_.prefillChunk > 0 ? std::min(cfg_.prefillChunk, cfg_.nBatch) : cfg_.nBatch;
  // Recurrent and hybrid memories cannot drop a tail of a sequence: reuse only whole states.
  canTruncate_ = !llama_model_is_recurrent(model_) && !llama_model_is_hybrid(model_);
  slots_.resize(cfg_.nSeqMax);
  for (uint32_t i = 0; i < cfg_.nSeqMax; i++) slots_[i].seq = static_cast<int32_t>(i);
  if (cfg_.cacheRamBytes > 0 && cfg_.reuse) ram_ = std::make_unique<StateCache>(cfg_.cacheRamBytes);
  counters_.ramBudget = cfg_.cacheRamBytes;
  counters_.kvCellsTotal = llama_n_ctx(ctx_);
  lastExpiry_ = Clock::now();
  if (!cfg_.cacheDir.empty() && cfg_.reuse) {
    // Files are only valid for the same weights and the same KV layout.
    Hash128 h;
    h.UpdateString(cfg_.modelFingerprint);
    h.UpdateValue(cp.type_k);
    h.UpdateValue(cp.type_v);
    h.UpdateValue(cfg_.kvUnified);
    h.UpdateValue(static_cast<int32_t>(llama_n_ctx_seq(ctx_)));
    std::string fp = h.Hex();
    disk_ = std::make_unique<DiskTier>(cfg_.cacheDir + "/" + fp.substr(0, 16), fp, cfg_.cacheDiskBytes);
    disk_->Load();
    counters_.diskBudget = cfg_.cacheDiskBytes;
  }

  Event ev;
  ev.type = EventType::Ready;
  ev.ready.nCtx = llama_n_ctx(ctx_);
  ev.ready.nCtxSeq = nCtxSeq_;
  ev.ready.nBatch = cfg_.nBatch;
  ev.ready.nUbatch = cfg_.nUbatch;
  ev.ready.nSeqMax = cfg_.nSeqMax;
  ev.ready.nThreads = llama_n_threads(ctx_);
  ev.ready.nThreadsBatch = llama_n_threads_batch(ctx_);
  ev.ready.kvUnified = cfg_.kvUnified;
  ev.ready.flashAttn = cfg_.flashAttn;
  ev.ready.typeK = static_cast<int32_t>(cp.type_k);
  ev.ready.typeV = static_cast<int32_t>(cp.type_v);
  ev.ready.canTruncate = canTruncate_;
  Emit(std::move(ev));
  FlushEvents();
  return true;
}

// ---- JS thread -----------------------------------------------------------------------

bool Scheduler::Submit(std::unique_ptr<RequestParams> params) {
  std::lock_guard<std::mutex> lk(mu_);
  if (waitingCount_ >= cfg_.maxQueued + cfg_.nSeqMax) return false;
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

void Scheduler::Emit(Event &&ev) { events_.push_back(std::move(ev)); }

void Scheduler::EmitPendingText(Request &r, bool evenIfEmpty) {
  if (r.pendingText.empty() && (!evenIfEmpty || r.pendingTokens.empty())) return;
  Event ev;
  ev.type = EventType::Text;
  ev.id = r.p->id;
  ev.text.swap(r.pendingText);
  ev.tokens.swap(r.pendingTokens);
  Emit(std::move(ev));
}

void Scheduler::EmitSpanDelta(Request &r) {
  if (r.pendingSpan.empty()) return;
  r.spanText += r.pendingSpan;
  Event ev;
  ev.type = EventType::ToolCallDelta;
  ev.id = r.p->id;
  ev.index = r.spanIndex;
  ev.text.swap(r.pendingSpan);
  Emit(std::move(ev));
}

void Scheduler::CloseSpan(Request &r, bool truncated) {
  r.spanStream->Flush(&r.pendingSpan);
  EmitSpanDelta(r);
  Event ev;
  ev.type = EventType::ToolCallEnd;
  ev.id = r.p->id;
  ev.index = r.spanIndex;
  ev.text = r.spanText;
  ev.tokens = r.spanTokens;
  ev.truncated = truncated;
  Emit(std::move(ev));
  r.spanOpen = false;
  r.spanIndex++;
}

void Scheduler::FlushEvents(bool force) {
  // Text deltas are handed over at most every millisecond (fast models sample a token every
  // few hundred microseconds; waking JS for each would take a core from the decode). Ends,
  // errors and tool-call events go at once, and everything goes before the thread waits.
  Clock::time_point now = Clock::now();
  if (!force && events_.empty() && std::chrono::duration<double, std::micro>(now - lastFlush_).count() < 1000.0) return;
  lastFlush_ = now;
  for (auto &rp : active_) {
    Request &r = *rp;
    if (r.done) continue;
    // Tokens travel with the text they produced: a token that only began a UTF-8
    // character (or a possible stop string) waits for the event that completes it.
    EmitPendingText(r, false);
    EmitSpanDelta(r);
  }
  if (!events_.empty()) {
    std::vector<Event> out;
    out.swap(events_);
    flush_(std::move(out));
  }
}

bool Scheduler::TokenizePrompt(Request &r, std::string *error) {
  if (r.p->hasText) {
    const std::string &text = r.p->promptText;
    if (text.size() > static_cast<size_t>(INT32_MAX / 2)) {
      *error = "The prompt text is too long to tokenize";
      return false;
    }
    std::vector<llama_token> out(text.size() + 8);
    int32_t n = llama_tokenize(vocab_, text.data(), static_cast<int32_t>(text.size()), out.data(),
                               static_cast<int32_t>(out.size()), r.p->addSpecial, r.p->parseSpecial);
    if (n < 0 && n != INT32_MIN) {
      out.resize(static_cast<size_t>(-n));
      n = llama_tokenize(vocab_, text.data(), static_cast<int32_t>(text.size()), out.data(),
                         static_cast<int32_t>(out.size()), r.p->addSpecial, r.p->parseSpecial);
    }
    if (n < 0) {
      *error = "The prompt could not be tokenized";
      return false;
    }
    out.resize(static_cast<size_t>(n));
    r.tokens = std::move(out);
  } else {
    r.tokens = std::move(r.p->promptTokens);
  }
  return true;
}

void Scheduler::DrainCommands(bool wait) {
  std::deque<std::unique_ptr<RequestParams>> submitted;
  std::vector<uint64_t> cancels;
  std::vector<std::pair<uint64_t, bool>> pauses;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (wait) {
      cv_.wait(lk, [&] { return closing_ || !submitted_.empty() || !cancels_.empty() || !pauses_.empty(); });
    }
    submitted.swap(submitted_);
    cancels.swap(cancels_);
    pauses.swap(pauses_);
    if (!closing_) abortNow_.store(false);
  }
  for (auto &params : submitted) {
    auto r = std::make_unique<Request>();
    r->p = std::move(params);
    r->tSubmit = Clock::now();
    r->text = std::make_unique<TextStream>(r->p->stops);
    std::string error;
    const char *code = nullptr;
    bool control = r->p->endSession || !r->p->forkFrom.empty();
    if (control) {
      waiting_.push_back(std::move(r));
      continue;
    }
    if (!TokenizePrompt(*r, &error)) {
      code = "INVALID_ARGUMENT";
    } else if (r->tokens.empty() && !r->p->continueSession) {
      code = "INVALID_ARGUMENT";
      error = "The prompt is empty: it produced no tokens";
    } else if (r->tokens.size() >= nCtxSeq_) {
      code = "CONTEXT_OVERFLOW";
      error = "The prompt has " + std::to_string(r->tokens.size()) + " tokens but a sequence of this context holds " +
              std::to_string(nCtxSeq_) + " (one more is needed to generate); use a larger contextSize or a shorter prompt";
    } else if (!r->sampler.Init(vocab_, r->p->sampling, cfg_.markers.Enabled() && r->p->markers && r->p->greedyToolSyntax,
                                &error)) {
      code = "INVALID_ARGUMENT";
    }
    if (code == nullptr && cfg_.markers.Enabled() && r->p->markers) {
      r->matcher = std::make_unique<MarkerMatcher>(&cfg_.markers);
    }
    r->nPrompt = r->tokens.size();
    r->stats.promptTokens = static_cast<int32_t>(r->nPrompt);
    if (code != nullptr) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        waitingCount_--;
      }
      Event ev;
      ev.type = EventType::Final;
      ev.id = r->p->id;
      ev.finishReason = "error";
      ev.code = code;
      ev.message = error;
      ev.stats = r->stats;
      Emit(std::move(ev));
      continue;
    }
    waiting_.push_back(std::move(r));
  }
  for (uint64_t id : cancels) {
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if ((*it)->p->id == id) {
        {
          std::lock_guard<std::mutex> lk(mu_);
          waitingCount_--;
        }
        Request &r = **it;
        r.stats.queuedMs = MsBetween(r.tSubmit, Clock::now());
        Event ev;
        ev.type = EventType::Final;
        ev.id = id;
        ev.finishReason = "abort";
        ev.code = "ABORTED";
        ev.message = "The request was aborted";
        ev.stats = r.stats;
        Emit(std::move(ev));
        waiting_.erase(it);
        break;
      }
    }
    for (auto &rp : active_) {
      if (rp->p->id == id && !rp->done) Finish(*rp, "abort", "ABORTED", "The request was aborted");
    }
  }
  for (auto &pp : pauses) {
    for (auto &rp : active_) {
      if (rp->p->id == pp.first) rp->paused = pp.second;
    }
  }
}

const std::vector<llama_token> &Scheduler::KvTokens(const Slot &s) const {
  // A busy slot's KV is its request's tokens up to nPast (positions below never change).
  if (s.req != nullptr) {
    scratch_.assign(s.req->tokens.begin(), s.req->tokens.begin() + static_cast<long>(s.req->nPast));
    return scratch_;
  }
  return s.tokens;
}

static size_t CommonPrefix(const std::vector<llama_token> &a, const std::vector<llama_token> &b) {
  size_t n = std::min(a.size(), b.size());
  size_t c = 0;
  while (c < n && a[c] == b[c]) c++;
  return c;
}

void Scheduler::UpdateCounters() {
  if (ctx_ != nullptr) counters_.kvCellsUsed = KvCellsUsed(ctx_, cfg_.nSeqMax, cfg_.kvUnified);
  counters_.ramBytes = ram_ ? ram_->Bytes() : 0;
  counters_.ramEntries = ram_ ? ram_->Count() : 0;
  counters_.ramEvictions = ram_ ? ram_->Evictions() : 0;
  counters_.sessions = sessions_.size();
  if (disk_) {
    counters_.diskBytes = disk_->Bytes();
    counters_.diskEntries = disk_->Count();
    counters_.diskRejected = disk_->Rejected();
  }
  uint64_t pinned = 0;
  for (auto &s : slots_) pinned += s.session.empty() ? 0 : 1;
  counters_.pinned = pinned;
}

void Scheduler::FailRequest(Request &r, const char *code, const std::string &message) {
  Event ev;
  ev.type = EventType::Final;
  ev.id = r.p->id;
  ev.finishReason = "error";
  ev.code = code;
  ev.message = message;
  ev.stats = r.stats;
  Emit(std::move(ev));
}

// Saves a slot's KV to the RAM tier (before it is overwritten, or when a session spills).
bool Scheduler::SaveToRam(Slot &s, const std::string &session) {
  if ((!ram_ && !disk_) || s.tokens.empty()) return false;
  if (session.empty() && s.tokens.size() < 16) return false;
  if (!ram_ && !session.empty()) return false;
  size_t size = llama_state_seq_get_size(ctx_, s.seq);
  if (size == 0) return false;
  if (!ram_) {
    std::vector<uint8_t> blob(size);
    size_t got = llama_state_seq_get_data(ctx_, blob.data(), blob.size(), s.seq);
    if (got > 0) {
      blob.resize(got);
      disk_->Save(s.tokens, std::move(blob));
    }
    return false;
  }
  if (size > ram_->Budget() && !disk_) return false;
  std::vector<uint8_t> blob(size);
  size_t got = llama_state_seq_get_data(ctx_, blob.data(), blob.size(), s.seq);
  if (got == 0) return false;
  blob.resize(got);
  if (disk_ && session.empty()) disk_->Save(s.tokens, blob);  // the I/O thread writes it
  bool ok = ram_->Insert(s.tokens, std::move(blob), session);
  UpdateCounters();
  return ok;
}

bool Scheduler::RestoreBlob(Slot &s, const CacheEntry &e, double *ms) {
  Clock::time_point t0 = Clock::now();
  llama_memory_seq_rm(mem_, s.seq, -1, -1);
  size_t n = 0;
  try {
    n = llama_state_seq_set_data(ctx_, e.blob.data(), e.blob.size(), s.seq);
  } catch (...) {
    n = 0;
  }
  *ms = MsBetween(t0, Clock::now());
  if (n == 0) {
    // A failed restore never leaves half a state behind: recompute instead.
    llama_memory_seq_rm(mem_, s.seq, -1, -1);
    s.tokens.clear();
    return false;
  }
  s.tokens = e.tokens;
  counters_.restores++;
  return true;
}

// A free (unpinned, idle) slot: the one sharing the longest prefix with the prompt; on a
// tie the one caching the least, so useful prefixes elsewhere survive.
Scheduler::Slot *Scheduler::FreeSlot(const std::vector<llama_token> &prompt) {
  Slot *best = nullptr;
  size_t bestCommon = 0;
  for (auto &s : slots_) {
    if (s.req != nullptr || !s.session.empty()) continue;
    size_t c = CommonPrefix(s.tokens, prompt);
    if (!canTruncate_ && c < s.tokens.size()) c = 0;
    if (best == nullptr || c > bestCommon || (c == bestCommon && s.tokens.size() < best->tokens.size())) {
      best = &s;
      bestCommon = c;
    }
  }
  return best;
}

// When every sequence is pinned, the least recently used idle session moves to the RAM tier.
Scheduler::Slot *Scheduler::SpillIdleSession(const std::string &keep) {
  Slot *victim = nullptr;
  for (auto &s : slots_) {
    if (s.req != nullptr || s.session.empty() || s.session == keep) continue;
    if (victim == nullptr || s.lastUsed < victim->lastUsed) victim = &s;
  }
  if (victim == nullptr) return nullptr;
  SaveToRam(*victim, victim->session);  // if it does not fit, the session comes back cold
  auto it = sessions_.find(victim->session);
  if (it != sessions_.end()) it->second.slot = -1;
  llama_memory_seq_rm(mem_, victim->seq, -1, -1);
  victim->tokens.clear();
  victim->session.clear();
  counters_.spills++;
  UpdateCounters();
  return victim;
}

void Scheduler::EndSession(const std::string &id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  if (it->second.slot >= 0) slots_[static_cast<size_t>(it->second.slot)].session.clear();  // KV stays as a plain cache
  if (ram_) {
    CacheEntry *e = ram_->FindSession(id);
    if (e != nullptr) ram_->Erase(e->id);
  }
  sessions_.erase(it);
  UpdateCounters();
}

void Scheduler::ExpireSessions() {
  Clock::time_point now = Clock::now();
  if (MsBetween(lastExpiry_, now) < 1000) return;
  lastExpiry_ = now;
  std::vector<std::string> expired;
  for (auto &kv : sessions_) {
    if (!kv.second.busy && MsBetween(kv.second.lastUsed, now) > cfg_.sessionTtlMs) expired.push_back(kv.first);
  }
  for (auto &id : expired) EndSession(id);
}

Scheduler::Placement Scheduler::TryAdmit(Request &r) {
  if (r.diskPending) return Placement::Wait;
  const RequestParams &p = *r.p;
  const std::string &sid = p.sessionId;
  Session *sess = nullptr;
  if (!sid.empty()) {
    auto it = sessions_.find(sid);
    if (it != sessions_.end()) sess = &it->second;
  }
  // ---- control requests -------------------------------------------------------------
  if (p.endSession) {
    if (sess != nullptr && sess->busy) {
      sess->endAfter = true;
    } else {
      EndSession(sid);
    }
    Event ev;
    ev.type = EventType::Final;
    ev.id = p.id;
    ev.finishReason = "done";
    Emit(std::move(ev));
    return Placement::Done;
  }
  if (!p.forkFrom.empty()) {
    auto src = sessions_.find(p.forkFrom);
    if (src == sessions_.end()) {
      FailRequest(r, "INVALID_ARGUMENT", "Unknown session \"" + p.forkFrom + "\"");
      return Placement::Done;
    }
    if (sess != nullptr) {
      FailRequest(r, "INVALID_ARGUMENT", "Session \"" + sid + "\" already exists");
      return Placement::Done;
    }
    if (src->second.busy) {
      if (p.waitForSession) return Placement::Wait;
      FailRequest(r, "SESSION_BUSY", "Session \"" + p.forkFrom + "\" is running a request");
      return Placement::Done;
    }
    Slot *target = FreeSlot({});
    if (target == nullptr) target = SpillIdleSession(p.forkFrom);
    if (target == nullptr) return Placement::Wait;
    if (target->tokens.size() >= (ram_ ? ram_->BlockSize() : SIZE_MAX)) SaveToRam(*target, "");
    Session &from = sessions_[p.forkFrom];
    llama_memory_seq_rm(mem_, target->seq, -1, -1);
    target->tokens.clear();
    if (from.slot >= 0) {
      Slot &srcSlot = slots_[static_cast<size_t>(from.slot)];
      llama_memory_seq_cp(mem_, srcSlot.seq, target->seq, -1, -1);  // shares cells (unified KV)
      target->tokens = srcSlot.tokens;
    } else if (ram_ != nullptr) {
      CacheEntry *e = ram_->FindSession(p.forkFrom);
      double ms = 0;
      if (e != nullptr) RestoreBlob(*target, *e, &ms);
    }
    Session &dst = sessions_[sid];
    dst.transcript = from.transcript;
    dst.slot = static_cast<int32_t>(target - slots_.data());
    dst.lastUsed = Clock::now();
    target->session = sid;
    target->lastUsed = dst.lastUsed;
    UpdateCounters();
    Event ev;
    ev.type = EventType::Final;
    ev.id = p.id;
    ev.finishReason = "done";
    Emit(std::move(ev));
    return Placement::Done;
  }
  // ---- sessions ----------------------------------------------------------------------
  if (sess != nullptr && sess->busy) {
    if (p.waitForSession) return Placement::Wait;
    FailRequest(r, "SESSION_BUSY", "Session \"" + sid + "\" is running a request; wait for it or pass waitForSession");
    return Placement::Done;
  }
  if (p.continueSession) {
    if (sess == nullptr) {
      FailRequest(r, "INVALID_ARGUMENT", "Unknown session \"" + sid + "\": continue() needs a session that ran a request");
      return Placement::Done;
    }
    if (p.hasExpect && p.expectCommitted != sess->transcript) {
      size_t at = CommonPrefix(p.expectCommitted, sess->transcript);
      FailRequest(r, "TRANSCRIPT_MISMATCH",
                  "The session's committed tokens differ from the expected ones at token " + std::to_string(at) + " (" +
                      std::to_string(sess->transcript.size()) + " committed, " + std::to_string(p.expectCommitted.size()) +
                      " expected)");
      return Placement::Done;
    }
    std::vector<llama_token> full = sess->transcript;
    full.insert(full.end(), r.tokens.begin(), r.tokens.end());
    r.tokens.swap(full);
    if (r.tokens.empty()) {
      FailRequest(r, "INVALID_ARGUMENT", "Nothing to continue from: the session and the tail are empty");
      return Placement::Done;
    }
    if (r.tokens.size() >= nCtxSeq_) {
      FailRequest(r, "CONTEXT_OVERFLOW", "The session plus the tail has " + std::to_string(r.tokens.size()) +
                                             " tokens but a sequence of this context holds " + std::to_string(nCtxSeq_));
      return Placement::Done;
    }
    r.nPrompt = r.tokens.size();
    r.stats.promptTokens = static_cast<int32_t>(r.nPrompt);
  }
  // ---- choose the sequence --------------------------------------------------------------
  Slot *target = nullptr;
  bool pinnedHit = false;
  if (sess != nullptr && sess->slot >= 0) {
    target = &slots_[static_cast<size_t>(sess->slot)];
    pinnedHit = true;
  } else {
    target = FreeSlot(r.tokens);
    if (target == nullptr) target = SpillIdleSession(sid);
    if (target == nullptr) return Placement::Wait;
  }
  std::string outcome = "cold", tier;
  if (!cfg_.reuse) {
    llama_memory_seq_rm(mem_, target->seq, -1, -1);
    target->tokens.clear();
  }
  size_t common = CommonPrefix(target->tokens, r.tokens);
  if (!canTruncate_ && common < target->tokens.size()) common = 0;
  if (common > 0) {
    tier = "live";
    outcome = pinnedHit && common == target->tokens.size() ? "sticky" : "partial";
  }
  // Better sources than the target's own KV: a spilled session, another sequence's KV
  // (shared cells with unified KV), the RAM tier, or the disk tier.
  const size_t minGain = 8;
  double restoreMs = 0;
  if (disk_ && canTruncate_ && cfg_.reuse && !r.diskReady && !r.diskPending) {
    // Decide on the disk tier before anything changes: a read makes the request wait
    // (without a sequence), so nothing may have been restored or copied for it yet.
    size_t best = common;
    if (sess != nullptr && sess->slot < 0 && ram_) {
      CacheEntry *e = ram_->FindSession(sid);
      if (e != nullptr) best = std::max(best, CommonPrefix(e->tokens, r.tokens));
    }
    if (cfg_.kvUnified) {
      for (auto &s : slots_) best = std::max(best, CommonPrefix(KvTokens(s), r.tokens));
    }
    if (ram_) {
      size_t c = 0;
      if (ram_->Lookup(r.tokens, &c) != nullptr) best = std::max(best, c);
    }
    size_t c = 0;
    DiskTier::Entry *e = disk_->Lookup(r.tokens, &c);
    if (e != nullptr && c >= best + minGain) {
      r.diskPending = true;
      r.diskTokens = e->tokens;
      disk_->Read(r.p->id, *e);
      return Placement::Wait;
    }
  }
  if (sess != nullptr && sess->slot < 0 && ram_ && cfg_.reuse) {
    CacheEntry *e = ram_->FindSession(sid);
    if (e != nullptr) {
      size_t c = CommonPrefix(e->tokens, r.tokens);
      if (c > common && (canTruncate_ || c == e->tokens.size())) {
        if (!target->tokens.empty() && target->session.empty()) {
          SaveToRam(*target, "");  // may evict entries: look the session up again
          e = ram_->FindSession(sid);
        }
      }
      if (e != nullptr && c > common && (canTruncate_ || c == e->tokens.size())) {
        if (RestoreBlob(*target, *e, &restoreMs)) {
          common = c;
          outcome = "restored";
          tier = "ram";
        } else {
          common = 0;
          outcome = "cold";
          tier.clear();
        }
        ram_->Erase(e->id);
      }
    }
  }
  if (cfg_.kvUnified && canTruncate_ && cfg_.reuse) {
    Slot *src = nullptr;
    size_t srcCommon = common;
    for (auto &s : slots_) {
      if (&s == target) continue;
      size_t c = CommonPrefix(KvTokens(s), r.tokens);
      if (c >= srcCommon + minGain) {
        src = &s;
        srcCommon = c;
      }
    }
    if (src != nullptr) {
      // Save what the target held before it is replaced, if it is worth keeping.
      if (target->session.empty() && target->tokens.size() > srcCommon) SaveToRam(*target, "");
      llama_memory_seq_rm(mem_, target->seq, -1, -1);
      llama_memory_seq_cp(mem_, src->seq, target->seq, 0, static_cast<llama_pos>(srcCommon));
      const std::vector<llama_token> &st = KvTokens(*src);
      target->tokens.assign(st.begin(), st.begin() + static_cast<long>(srcCommon));
      common = srcCommon;
      outcome = "partial";
      tier = "shared";
      counters_.shares++;
    }
  }
  if (ram_ && canTruncate_ && cfg_.reuse) {
    size_t c = 0;
    CacheEntry *e = ram_->Lookup(r.tokens, &c);
    if (e != nullptr && c >= common + minGain && target->session.empty() && target->tokens.size() > c) {
      SaveToRam(*target, "");  // may evict entries: look the prefix up again
      e = ram_->Lookup(r.tokens, &c);
    }
    if (e != nullptr && c >= common + minGain) {
      double ms = 0;
      if (RestoreBlob(*target, *e, &ms)) {
        ram_->Touch(e);
        common = c;
        outcome = "restored";
        tier = "ram";
        restoreMs += ms;
      } else {
        common = 0;
        outcome = "cold";
        tier.clear();
      }
    }
  }
  if (r.diskReady) {
    // The blob read for this request; it was verified (checksum) on the I/O thread.
    r.diskReady = false;
    size_t c = CommonPrefix(r.diskTokens, r.tokens);
    if (c >= common + minGain) {
      if (target->session.empty() && target->tokens.size() > c) SaveToRam(*target, "");
      CacheEntry tmp;
      tmp.tokens = std::move(r.diskTokens);
      tmp.blob = std::move(r.diskBlob);
      double ms = 0;
      if (RestoreBlob(*target, tmp, &ms)) {
        common = c;
        outcome = "restored";
        tier = "disk";
        restoreMs += ms;
        counters_.diskRestores++;
      } else {
        common = 0;
        outcome = "cold";
        tier.clear();
      }
    }
    r.diskBlob.clear();
  }
  // Drop what the prompt does not share; keep one prompt token to decode for logits.
  if (!target->tokens.empty() && target->session.empty() && outcome != "restored" && tier != "shared" &&
      common < target->tokens.size() / 2) {
    SaveToRam(*target, "");  // the slot's old content is about to be lost
  }
  size_t keep = p.prefillOnly ? common : std::min(common, r.tokens.size() - 1);
  if (keep < target->tokens.size()) {
    if (keep == 0 || !llama_memory_seq_rm(mem_, target->seq, static_cast<llama_pos>(keep), -1)) {
      llama_memory_seq_rm(mem_, target->seq, -1, -1);
      keep = 0;
    }
    target->tokens.resize(keep);
  }
  if (keep == 0) {
    outcome = "cold";
    tier.clear();
  } else if (outcome == "partial" && keep + 1 >= r.tokens.size() && tier == "live") {
    outcome = "exact";
  }
  // ---- place ----------------------------------------------------------------------------
  if (!sid.empty()) {
    Session &s = sessions_[sid];
    s.slot = static_cast<int32_t>(target - slots_.data());
    s.busy = true;
    s.lastUsed = Clock::now();
    target->session = sid;
  }
  target->req = &r;
  target->lastUsed = Clock::now();
  r.slot = target;
  r.nPast = keep;
  r.stats.reusedTokens = static_cast<int32_t>(keep);
  r.stats.cacheOutcome = outcome;
  r.stats.cacheTier = tier;
  r.stats.restoreMs = restoreMs;
  r.tAdmit = Clock::now();
  r.stats.queuedMs = MsBetween(r.tSubmit, r.tAdmit);
  UpdateCounters();
  return Placement::Placed;
}

bool Scheduler::Admit() {
  bool progressed = false;
  ExpireSessions();
  if (disk_) {
    for (auto &res : disk_->Poll()) {
      for (auto &w : waiting_) {
        if (w->p->id != res.requestId) continue;
        w->diskPending = false;
        w->diskReady = res.ok;
        if (res.ok) w->diskBlob = std::move(res.blob);
        else w->diskTokens.clear();
      }
    }
    UpdateCounters();
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Placement pl = TryAdmit(**it);
    if (pl == Placement::Wait) {
      // A request waiting for its own busy session must not block the others.
      const RequestParams &p = *(*it)->p;
      bool sessionWait = ((*it)->diskPending) || (p.waitForSession && (!p.sessionId.empty() || !p.forkFrom.empty()));
      if (!sessionWait) {
        bool anyFree = false;
        for (auto &s : slots_) anyFree = anyFree || (s.req == nullptr);
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
      if (rp->p->prefillOnly && rp->nPast == rp->tokens.size()) {
        Request &r = *rp;
        active_.push_back(std::move(rp));
        Finish(r, "prefill");
      } else {
        active_.push_back(std::move(rp));
      }
    }
    it = waiting_.erase(it);
  }
  return progressed;
}

bool Scheduler::BuildBatch() {
  batch_.n_tokens = 0;
  batchReqs_.clear();
  const int32_t cap = static_cast<int32_t>(cfg_.nBatch);
  auto add = [&](Request &r, size_t count, bool wantLogits) {
    for (size_t i = 0; i < count; i++) {
      int32_t k = batch_.n_tokens++;
      size_t pos = r.nPast + i;
      batch_.token[k] = r.tokens[pos];
      batch_.pos[k] = static_cast<llama_pos>(pos);
      batch_.n_seq_id[k] = 1;
      batch_.seq_id[k][0] = r.slot->seq;
      batch_.logits[k] = (wantLogits && i + 1 == count) ? 1 : 0;
    }
    r.batchCount = count;
    r.logitIdx = wantLogits ? batch_.n_tokens - 1 : -1;
    batchReqs_.push_back(&r);
  };
  // 1) One token for every decoding sequence: decoding never waits behind a prompt.
  for (auto &rp : active_) {
    Request &r = *rp;
    r.batchCount = 0;
    r.logitIdx = -1;
    if (r.done || r.paused || r.nGenerated == 0) continue;
    if (batch_.n_tokens >= cap) break;
    if (r.tokens.size() - r.nPast == 1) add(r, 1, true);
  }
  // 2) Prompt chunks, oldest request first, under the per-tick budget. A quarter of the
  //    budget is always kept for prompts so many decoders cannot starve a new request.
  int32_t nDecode = batch_.n_tokens;
  int32_t budget = static_cast<int32_t>(tickBudget_);
  int32_t prefillAllowance = std::max(budget - nDecode, std::max<int32_t>(1, budget / 4));
  prefillAllowance = std::min(prefillAllowance, cap - nDecode);
  for (auto &rp : active_) {
    Request &r = *rp;
    if (prefillAllowance <= 0) break;
    if (r.done || r.nGenerated > 0) continue;
    size_t pending = r.tokens.size() - r.nPast;
    if (pending == 0) continue;
    size_t n = std::min(pending, static_cast<size_t>(prefillAllowance));
    if (!r.prefillStarted) {
      r.prefillStarted = true;
      r.tPrefillStart = Clock::now();
    }
    add(r, n, n == pending && !r.p->prefillOnly);
    prefillAllowance -= static_cast<int32_t>(n);
  }
  return batch_.n_tokens > 0;
}

void Scheduler::FailBatch(const char *code, const std::string &message) {
  for (Request *r : batchReqs_) {
    if (!r->done) Finish(*r, "error", code, message);
  }
}

void Scheduler::DecodeBatch() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    inBatch_.clear();
    for (Request *r : batchReqs_) inBatch_.push_back(r->p->id);
    for (uint64_t id : cancels_) {
      if (std::find(inBatch_.begin(), inBatch_.end(), id) != inBatch_.end()) abortNow_.store(true);
    }
    if (closing_) abortNow_.store(true);
  }
  int32_t ret;
  try {
    ret = llama_decode(ctx_, batch_);
  } catch (const std::exception &e) {
    ret = -100;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    inBatch_.clear();
  }
  Clock::time_point now = Clock::now();
  if (ret == 0) {
    for (Request *rp : batchReqs_) {
      Request &r = *rp;
      r.nPast += r.batchCount;
      if (r.nGenerated == 0 && r.nPast == r.nPrompt) {
        r.stats.prefilledTokens = static_cast<int32_t>(r.nPrompt) - r.stats.reusedTokens;
        r.stats.prefillMs = MsBetween(r.tPrefillStart, now);
        if (r.p->prefillOnly) {
          Finish(r, "prefill");
          continue;
        }
      }
      if (r.logitIdx < 0) continue;
      llama_token tok = r.sampler.Sample(ctx_, r.logitIdx);
      if (tok == -2) {
        Finish(r, "error", "GRAMMAR_FAILED", "The grammar allows no token at this point of the output");
        continue;
      }
      if (tok < 0) {
        Finish(r, "error", "DECODE_FAILED", "llama.cpp returned no logits for this sequence");
        continue;
      }
      HandleToken(r, tok);
    }
    return;
  }
  if (ret == 2) {
    // Aborted: finished ubatches stay in the KV. Keep what was computed, except a row
    // whose logits we needed (they are not kept), and re-queue the rest.
    for (Request *rp : batchReqs_) {
      Request &r = *rp;
      if (r.done) continue;
      llama_pos posMax = llama_memory_seq_pos_max(mem_, r.slot->seq);
      size_t computed = posMax < 0 ? 0 : static_cast<size_t>(posMax) + 1;
      size_t keep = computed > r.nPast ? std::min(computed - r.nPast, r.batchCount) : 0;
      if (r.logitIdx >= 0 && keep == r.batchCount) keep--;
      r.nPast += keep;
      if (!llama_memory_seq_rm(mem_, r.slot->seq, static_cast<llama_pos>(r.nPast), -1)) {
        llama_memory_seq_rm(mem_, r.slot->seq, -1, -1);
        r.nPast = 0;
      }
    }
    return;
  }
  if (ret == 1) {
    // No room in the KV cache: drop the KV kept by idle sequences and retry next tick.
    bool freed = false;
    for (auto &s : slots_) {
      if (s.req == nullptr && !s.tokens.empty()) {
        llama_memory_seq_rm(mem_, s.seq, -1, -1);
        s.tokens.clear();
        freed = true;
      }
    }
    if (!freed) {
      FailBatch("KV_CACHE_FULL",
                "The KV cache is full: the running sequences together need more than contextSize cells; "
                "use a larger contextSize or fewer parallel sequences");
    }
    return;
  }
  FailBatch("DECODE_FAILED", "llama_decode failed with code " + std::to_string(ret));
}

std::string Scheduler::Piece(llama_token tok, bool special) const {
  char buf[256];
  int32_t n = llama_token_to_piece(vocab_, tok, buf, sizeof(buf), 0, special);
  if (n >= 0) return std::string(buf, static_cast<size_t>(n));
  std::string piece(static_cast<size_t>(-n), '\0');
  n = llama_token_to_piece(vocab_, tok, piece.data(), static_cast<int32_t>(piece.size()), 0, special);
  piece.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return piece;
}

// Routes what the marker matcher released. Returns true when a stop string completed.
bool Scheduler::ProcessOutputs(Request &r, const std::vector<MarkerMatcher::Output> &outs) {
  for (const auto &o : outs) {
    switch (o.kind) {
      case MarkerMatcher::Kind::Text:
        for (llama_token t : o.tokens) {
          if (r.p->emitTokens) r.pendingTokens.push_back(t);
          if (r.text->Push(Piece(t, r.p->renderSpecial), &r.pendingText)) return true;
        }
        break;
      case MarkerMatcher::Kind::Open: {
        // Text before a span is final: stop strings apply to text outside spans only.
        r.text->Flush(&r.pendingText);
        EmitPendingText(r, true);
        r.spanOpen = true;
        r.spanTokens.assign(o.tokens.begin(), o.tokens.end());
        r.spanText.clear();
        r.spanStream = std::make_unique<TextStream>();
        Event ev;
        ev.type = EventType::ToolCallStart;
        ev.id = r.p->id;
        ev.index = r.spanIndex;
        Emit(std::move(ev));
        break;
      }
      case MarkerMatcher::Kind::Body:
      case MarkerMatcher::Kind::PayloadOpen:
      case MarkerMatcher::Kind::PayloadClose:
        // Span bytes are exact: control tokens inside a span are rendered.
        for (llama_token t : o.tokens) {
          r.spanTokens.push_back(t);
          r.spanStream->Push(Piece(t, true), &r.pendingSpan);
        }
        break;
      case MarkerMatcher::Kind::Close:
        r.spanTokens.insert(r.spanTokens.end(), o.tokens.begin(), o.tokens.end());
        CloseSpan(r, false);
        break;
    }
  }
  return false;
}

void Scheduler::HandleToken(Request &r, llama_token tok) {
  Clock::time_point now = Clock::now();
  if (r.nGenerated == 0) {
    r.tFirstToken = now;
    r.stats.ttftMs = MsBetween(r.tSubmit, now);
  }
  r.tLast = now;
  if (llama_vocab_is_eog(vocab_, tok)) {
    // An end marker may itself end generation (e.g. <|eom_id|>): let it close the span.
    if (r.matcher && r.spanOpen &&
        std::find(cfg_.markers.end.begin(), cfg_.markers.end.end(), tok) != cfg_.markers.end.end()) {
      outs_.clear();
      r.matcher->Push(tok, &outs_);
      ProcessOutputs(r, outs_);
    }
    Finish(r, "eog");
    return;
  }
  r.tokens.push_back(tok);
  r.nGenerated++;
  bool stopped;
  if (r.matcher) {
    outs_.clear();
    r.matcher->Push(tok, &outs_);
    stopped = ProcessOutputs(r, outs_);
    if (r.p->greedyToolSyntax) r.sampler.UseGreedy(r.matcher->WantsGreedy());
  } else {
    if (r.p->emitTokens) r.pendingTokens.push_back(tok);
    stopped = r.text->Push(Piece(tok, r.p->renderSpecial), &r.pendingText);
  }
  if (stopped) {
    Finish(r, "stop");
    return;
  }
  if (r.p->maxTokens >= 0 && r.nGenerated >= r.p->maxTokens) {
    Finish(r, "length");
    return;
  }
  if (r.tokens.size() >= nCtxSeq_) Finish(r, "length");
}

void Scheduler::ReleaseSlot(Request &r, bool keepKv) {
  Slot *s = r.slot;
  if (s == nullptr) return;
  bool pinned = !s->session.empty();
  if (keepKv || pinned) {
    // A pinned session keeps its KV even after an abort: tokens below nPast are valid.
    s->tokens.assign(r.tokens.begin(), r.tokens.begin() + static_cast<long>(r.nPast));
  } else {
    llama_memory_seq_rm(mem_, s->seq, -1, -1);
    s->tokens.clear();
  }
  s->lastUsed = Clock::now();
  if (pinned) {
    auto it = sessions_.find(s->session);
    if (it != sessions_.end()) {
      Session &sess = it->second;
      sess.busy = false;
      sess.lastUsed = s->lastUsed;
      if (keepKv) sess.transcript = r.tokens;  // committed: prompt + generated (EOG excluded)
      if (sess.endAfter) EndSession(std::string(it->first));  // a copy: the key dies with the entry
    }
  }
  if (r.p->prefillOnly && keepKv && !pinned) SaveToRam(*s, "");  // a warmed prefix survives slot reuse
  s->req = nullptr;
  r.slot = nullptr;
  UpdateCounters();
}

void Scheduler::Finish(Request &r, const char *reason, const char *code, const std::string &message) {
  if (r.done) return;
  r.done = true;
  Clock::time_point now = Clock::now();
  std::string reasonStr = reason;
  // Held-back text (a possible stop string, a possible marker, an incomplete character) is
  // released only when generation really ended there (eog, length). An abort or error cuts
  // the output short: what was held stays unsaid, so everything streamed is a prefix of what
  // the full run would have streamed.
  if (reasonStr == "eog" || reasonStr == "length") {
    if (r.matcher) {
      outs_.clear();
      r.matcher->Flush(&outs_);
      ProcessOutputs(r, outs_);
    }
    r.text->Flush(&r.pendingText);
  }
  EmitPendingText(r, true);
  if (r.spanOpen) CloseSpan(r, true);  // never reported as a complete call
  FinalStats &st = r.stats;
  st.generatedTokens = r.nGenerated;
  if (st.prefilledTokens == 0 && r.nPast > static_cast<size_t>(st.reusedTokens)) {
    st.prefilledTokens = static_cast<int32_t>(std::min(r.nPast, r.nPrompt)) - st.reusedTokens;
  }
  if (st.prefillMs > 0) st.prefillTokensPerSec = st.prefilledTokens / (st.prefillMs / 1000.0);
  if (r.nGenerated > 1) {
    st.decodeMs = MsBetween(r.tFirstToken, r.tLast);
    if (st.decodeMs > 0) st.decodeTokensPerSec = (r.nGenerated - 1) / (st.decodeMs / 1000.0);
  }
  (void)now;
  Event ev;
  ev.type = EventType::Final;
  ev.id = r.p->id;
  ev.finishReason = reasonStr;
  if (code != nullptr) {
    ev.code = code;
    ev.message = message;
  }
  if (reasonStr == "stop") ev.stop = r.text->MatchedStop();
  ev.stats = st;
  Emit(std::move(ev));
  bool clean = reasonStr == "eog" || reasonStr == "stop" || reasonStr == "length" || reasonStr == "prefill";
  ReleaseSlot(r, clean);
}

void Scheduler::Run() {
  bool progressed = false;  // the last Admit() placed or ended a request
  while (true) {
    bool runnable = false;
    for (auto &rp : active_) {
      if (!rp->done && !rp->paused) runnable = true;
    }
    bool diskWaits = false;
    for (auto &w : waiting_) diskWaits = diskWaits || w->diskPending;
    // Block only when nothing can move without a command: no decode to run, and the last
    // admission round could place nothing (e.g. requests waiting for a busy session).
    if (diskWaits && !runnable) std::this_thread::sleep_for(std::chrono::microseconds(200));
    bool idle = !runnable && !progressed && !diskWaits;
    if (idle || !runnable) FlushEvents(true);
    DrainCommands(idle);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (closing_) break;
    }
    try {
      progressed = Admit();
      if (BuildBatch()) DecodeBatch();
    } catch (const std::exception &e) {
      // A C++ exception must never leave the engine thread: fail what was running, go on.
      for (auto &rp : active_) {
        if (!rp->done) Finish(*rp, "error", "INTERNAL", std::string("Internal engine error: ") + e.what());
      }
      progressed = true;
    }
    FlushEvents();
    counters_.kvCellsUsed = KvCellsUsed(ctx_, cfg_.nSeqMax, cfg_.kvUnified);
    // A finished request frees its sequence (and maybe a session someone waits for).
    for (auto &rp : active_) progressed = progressed || rp->done;
    active_.erase(std::remove_if(active_.begin(), active_.end(), [](const std::unique_ptr<Request> &r) { return r->done; }),
                  active_.end());
  }
  // Closing: every request still here ends with DISPOSED.
  for (auto &rp : active_) {
    if (!rp->done) Finish(*rp, "error", "DISPOSED", "The context was disposed while the request was running");
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto &p : submitted_) {
      auto r = std::make_unique<Request>();
      r->p = std::move(p);
      waiting_.push_back(std::move(r));
    }
    submitted_.clear();
  }
  for (auto &rp : waiting_) {
    Event ev;
    ev.type = EventType::Final;
    ev.id = rp->p->id;
    ev.finishReason = "error";
    ev.code = "DISPOSED";
    ev.message = "The context was disposed before the request started";
    ev.stats = rp->stats;
    Emit(std::move(ev));
  }
  waiting_.clear();
  FlushEvents(true);
  active_.clear();
  // With a disk tier, what the sequences hold survives the restart (written before the
  // I/O thread is joined below).
  if (disk_) {
    for (auto &s : slots_) {
      if (s.tokens.size() < 16) continue;
      size_t size = llama_state_seq_get_size(ctx_, s.seq);
      std::vector<uint8_t> blob(size);
      size_t got = size > 0 ? llama_state_seq_get_data(ctx_, blob.data(), blob.size(), s.seq) : 0;
      if (got == 0) continue;
      blob.resize(got);
      disk_->Save(s.tokens, std::move(blob));
    }
  }
  if (batch_.token != nullptr) llama_batch_free(batch_);
  batch_ = llama_batch{};
  if (ctx_ != nullptr) llama_free(ctx_);
  ctx_ = nullptr;
  mem_ = nullptr;
  disk_.reset();  // finishes queued writes, then joins the I/O thread
}

}  // namespace llamux
