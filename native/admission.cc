// Admission: placing a waiting request on a sequence. Session commands (end, fork) are
// answered here; a generation gets a target sequence, a reuse plan (reuse_planner.h), and
// the KV the plan names. Part of the Scheduler class (scheduler.h).
#include <algorithm>

#include "scheduler.h"

namespace llamux {

const std::vector<llama_token> &Scheduler::KvTokens(const Sequence &s) const {
  // A busy sequence's KV is its request's tokens up to nPast (positions below never change).
  if (s.req != nullptr) {
    scratch_.assign(s.req->tokens.begin(), s.req->tokens.begin() + static_cast<long>(s.req->nPast));
    return scratch_;
  }
  return s.tokens;
}

bool Scheduler::SaveState(Sequence &s, const std::string &session) {
  bool ok = tiers_->Save(s, session);
  UpdateCounters();
  return ok;
}

// A free (unpinned, idle) sequence: the one sharing the longest prefix with the prompt; on
// a tie the one caching the least, so useful prefixes elsewhere survive.
Sequence *Scheduler::FreeSequence(const std::vector<llama_token> &prompt, const std::string &scope) {
  Sequence *best = nullptr;
  size_t bestCommon = 0;
  for (auto &s : sequences_) {
    if (s.req != nullptr || sessions_.IsPinned(s.seq)) continue;
    size_t c = s.scope == scope ? CommonPrefix(s.tokens, prompt) : 0;
    if (!canTruncate_ && c < s.tokens.size()) c = 0;
    if (best == nullptr || c > bestCommon || (c == bestCommon && s.tokens.size() < best->tokens.size())) {
      best = &s;
      bestCommon = c;
    }
  }
  return best;
}

// When every sequence is pinned, the least recently used idle session moves to the RAM tier.
Sequence *Scheduler::SpillIdleSession(const std::string &keep) {
  Sequence *victim = nullptr;
  for (auto &s : sequences_) {
    const std::string &owner = sessions_.PinnedTo(s.seq);
    if (s.req != nullptr || owner.empty() || owner == keep) continue;
    if (victim == nullptr || s.lastUsed < victim->lastUsed) victim = &s;
  }
  if (victim == nullptr) return nullptr;
  SaveState(*victim, sessions_.PinnedTo(victim->seq));  // if it does not fit, the session comes back cold
  sessions_.Unpin(victim->seq);
  llama_memory_seq_rm(mem_, victim->seq, -1, -1);
  victim->tokens.clear();
  counters_.spills++;
  UpdateCounters();
  return victim;
}

void Scheduler::ForgetSession(const std::string &id) {
  if (sessions_.Find(id) == nullptr) return;
  sessions_.Erase(id);  // a pinned sequence's KV stays as a plain cache
  if (RamTier *ram = tiers_->Ram()) {
    if (CacheEntry *e = ram->FindSession(id)) ram->Erase(e->id);
  }
  UpdateCounters();
}

void Scheduler::ExpireSessions() {
  Clock::time_point now = Clock::now();
  if (MsBetween(lastExpiry_, now) < 1000) return;
  lastExpiry_ = now;
  for (auto &id : sessions_.Expired(now, cfg_.sessionTtlMs)) ForgetSession(id);
}

Scheduler::Placement Scheduler::EndSession(Request &r) {
  const std::string &sid = r.p->sessionId;
  SessionState *sess = sessions_.Find(sid);
  if (sess != nullptr && sess->busy) {
    sess->endAfter = true;
  } else {
    ForgetSession(sid);
  }
  output_.Emit(Event::SessionDone(r.p->id));
  return Placement::Done;
}

Scheduler::Placement Scheduler::ForkSession(Request &r) {
  const RequestParams &p = *r.p;
  const std::string &fromId = p.command->from;
  SessionState *from = sessions_.Find(fromId);
  if (from == nullptr) {
    output_.Emit(Event::SessionFailed(p.id, ErrorCode::InvalidArgument, "Unknown session \"" + fromId + "\""));
    return Placement::Done;
  }
  if (sessions_.Find(p.sessionId) != nullptr) {
    output_.Emit(Event::SessionFailed(p.id, ErrorCode::InvalidArgument, "Session \"" + p.sessionId + "\" already exists"));
    return Placement::Done;
  }
  if (from->busy) {
    if (p.waitForSession) return Placement::Wait;
    output_.Emit(Event::SessionFailed(p.id, ErrorCode::SessionBusy, "Session \"" + fromId + "\" is running a request"));
    return Placement::Done;
  }
  Sequence *target = FreeSequence({}, "");
  if (target == nullptr) target = SpillIdleSession(fromId);
  if (target == nullptr) return Placement::Wait;
  RamTier *ram = tiers_->Ram();
  if (target->tokens.size() >= (ram ? ram->BlockSize() : SIZE_MAX)) SaveState(*target, "");
  from = sessions_.Find(fromId);  // still there: nothing above forgets sessions
  llama_memory_seq_rm(mem_, target->seq, -1, -1);
  target->tokens.clear();
  if (from->sequence >= 0) {
    Sequence &src = sequences_[static_cast<size_t>(from->sequence)];
    llama_memory_seq_cp(mem_, src.seq, target->seq, -1, -1);  // shares cells (unified KV)
    target->tokens = src.tokens;
  } else if (ram != nullptr) {
    double ms = 0;
    if (CacheEntry *e = ram->FindSession(fromId)) tiers_->Restore(*target, e->tokens, e->blob, &ms);
  }
  std::vector<llama_token> transcript = from->transcript;
  target->scope = from->scope;
  std::string scope = from->scope;
  SessionState &dst = sessions_.Create(p.sessionId);
  dst.scope = std::move(scope);
  dst.transcript = std::move(transcript);
  dst.lastUsed = Clock::now();
  dst.ttlMs = p.sessionTtlMs;
  sessions_.Pin(p.sessionId, target->seq);
  target->lastUsed = dst.lastUsed;
  UpdateCounters();
  output_.Emit(Event::SessionDone(p.id));
  return Placement::Done;
}

// Checks a request on a session and, for continue(), puts the committed tokens before its
// tail. Returns Placed when the request may go on.
Scheduler::Placement Scheduler::PrepareSession(Request &r, SessionState *sess) {
  const RequestParams &p = *r.p;
  const std::string &sid = p.sessionId;
  auto fail = [&](ErrorCode code, const std::string &message) {
    output_.Emit(Event::Failed(p.id, code, message, r.stats));
    return Placement::Done;
  };
  if (sess != nullptr && sess->busy) {
    if (p.waitForSession) return Placement::Wait;
    return fail(ErrorCode::SessionBusy, "Session \"" + sid + "\" is running a request; wait for it or pass waitForSession");
  }
  if (!p.continueSession) return Placement::Placed;
  if (sess == nullptr) {
    return fail(ErrorCode::InvalidArgument, "Unknown session \"" + sid + "\": continue() needs a session that ran a request");
  }
  if (p.hasExpect && p.expectCommitted != sess->transcript) {
    size_t at = CommonPrefix(p.expectCommitted, sess->transcript);
    return fail(ErrorCode::TranscriptMismatch,
                "The session's committed tokens differ from the expected ones at token " + std::to_string(at) + " (" +
                    std::to_string(sess->transcript.size()) + " committed, " + std::to_string(p.expectCommitted.size()) +
                    " expected)");
  }
  std::vector<llama_token> full = sess->transcript;
  full.insert(full.end(), r.tokens.begin(), r.tokens.end());
  r.tokens.swap(full);
  if (r.tokens.empty()) return fail(ErrorCode::InvalidArgument, "Nothing to continue from: the session and the tail are empty");
  if (r.tokens.size() >= sequenceContextSize_) {
    return fail(ErrorCode::ContextOverflow, "The session plus the tail has " + std::to_string(r.tokens.size()) +
                                                " tokens but a sequence of this context holds " + std::to_string(sequenceContextSize_));
  }
  r.nPrompt = r.tokens.size();
  r.stats.promptTokens = static_cast<int32_t>(r.nPrompt);
  return Placement::Placed;
}

// What each source shares with the prompt (no KV changes).
ReuseInputs Scheduler::MeasureReuse(Request &r, Sequence &target, bool pinned) {
  ReuseInputs in;
  in.enabled = cfg_.prefixCache;
  in.canTruncate = canTruncate_;
  in.unifiedKv = cfg_.unifiedKv;
  in.pinned = pinned;
  in.promptTokens = r.tokens.size();
  // Another scope's KV is never reused (tenant isolation): it counts as nothing shared.
  const std::string &scope = r.p->cacheScope;
  in.liveTokens = target.tokens.size();
  in.liveCommon = target.scope == scope ? CommonPrefix(target.tokens, r.tokens) : 0;
  in.target = target.seq;
  if (!cfg_.prefixCache) return in;
  RamTier *ram = tiers_->Ram();
  SessionState *sess = r.p->sessionId.empty() ? nullptr : sessions_.Find(r.p->sessionId);
  if (sess != nullptr && sess->sequence < 0 && ram != nullptr) {
    if (CacheEntry *e = ram->FindSession(r.p->sessionId)) {
      in.hasSession = true;
      in.sessionTokens = e->tokens.size();
      in.sessionCommon = CommonPrefix(e->tokens, r.tokens);
    }
  }
  if (cfg_.unifiedKv) {
    for (auto &s : sequences_) {
      const std::string &owner = s.req != nullptr ? s.req->p->cacheScope : s.scope;
      in.sequenceCommon.push_back(owner == scope ? CommonPrefix(KvTokens(s), r.tokens) : 0);
    }
  }
  if (!scope.empty()) return in;  // the prefix tiers hold shared-scope KV only
  if (ram != nullptr) {
    size_t c = 0;
    in.hasRam = ram->Lookup(r.tokens, &c) != nullptr;
    in.ramCommon = c;
  }
  DiskTier *disk = tiers_->Disk();
  if (disk != nullptr && !r.diskReady && !r.diskPending) {
    size_t c = 0;
    in.hasDisk = disk->Lookup(r.tokens, &c) != nullptr;
    in.diskCommon = c;
  }
  if (r.diskReady) {
    in.diskReady = true;
    in.diskReadyCommon = CommonPrefix(r.diskTokens, r.tokens);
  }
  return in;
}

// Makes the target hold the plan's KV. Returns the prompt tokens it provides; on a failed
// restore the plan becomes None (the sequence is empty, the prompt is prefilled cold).
size_t Scheduler::ApplyReuse(Request &r, Sequence &target, ReusePlan &plan, const ReuseInputs &in, double *restoreMs) {
  RamTier *ram = tiers_->Ram();
  bool unpinned = !sessions_.IsPinned(target.seq);
  auto fallBack = [&] {  // the target's own KV, untouched
    plan.source = plan.liveCommon > 0 ? ReuseSource::Live : ReuseSource::None;
    plan.common = plan.liveCommon;
  };
  auto restore = [&](const std::vector<llama_token> &tokens, const std::vector<uint8_t> &blob) {
    double ms = 0;
    bool ok = tiers_->Restore(target, tokens, blob, &ms);
    *restoreMs += ms;
    if (!ok) {
      plan.source = ReuseSource::None;
      plan.common = 0;
    }
    return ok;
  };
  const std::string &sid = r.p->sessionId;
  // A session that comes back onto a sequence no longer needs its spilled state.
  CacheEntry *spilled = in.hasSession && ram != nullptr ? ram->FindSession(sid) : nullptr;
  switch (plan.source) {
    case ReuseSource::None:
    case ReuseSource::Live:
      break;
    case ReuseSource::Session: {
      if (!target.tokens.empty() && unpinned) {
        SaveState(target, "");  // may evict entries: look the session up again
        spilled = ram->FindSession(sid);
      }
      if (spilled == nullptr) {
        fallBack();
        break;
      }
      restore(spilled->tokens, spilled->blob);
      break;
    }
    case ReuseSource::Shared: {
      Sequence &src = sequences_[static_cast<size_t>(plan.shareFrom)];
      // Save what the target held before it is replaced, if it is worth keeping.
      if (unpinned && target.tokens.size() > plan.common) SaveState(target, "");
      llama_memory_seq_rm(mem_, target.seq, -1, -1);
      llama_memory_seq_cp(mem_, src.seq, target.seq, 0, static_cast<llama_pos>(plan.common));
      const std::vector<llama_token> &st = KvTokens(src);
      target.tokens.assign(st.begin(), st.begin() + static_cast<long>(plan.common));
      counters_.shares++;
      break;
    }
    case ReuseSource::Ram: {
      size_t c = plan.common;
      CacheEntry *e = ram->Lookup(r.tokens, &c);
      if (unpinned && target.tokens.size() > c) {
        SaveState(target, "");  // may evict entries: look the prefix up again
        e = ram->Lookup(r.tokens, &c);
      }
      if (e == nullptr || c < plan.liveCommon + in.minGain) {
        fallBack();
        break;
      }
      plan.common = c;
      if (restore(e->tokens, e->blob)) ram->Touch(e);
      break;
    }
    case ReuseSource::Disk: {
      // The blob read for this request; it was verified (checksum) on the I/O thread.
      if (unpinned && target.tokens.size() > plan.common) SaveState(target, "");
      std::vector<llama_token> tokens = std::move(r.diskTokens);
      std::vector<uint8_t> blob = std::move(r.diskBlob);
      if (restore(tokens, blob)) counters_.diskRestores++;
      break;
    }
  }
  if (in.hasSession && ram != nullptr) {
    if (CacheEntry *e = ram->FindSession(sid)) ram->Erase(e->id);
  }
  r.diskReady = false;
  r.diskBlob.clear();
  return plan.common;
}

Scheduler::Placement Scheduler::TryAdmit(Request &r) {
  if (r.diskPending) return Placement::Wait;
  const RequestParams &p = *r.p;
  if (p.command) return p.command->op == SessionCommand::Op::End ? EndSession(r) : ForkSession(r);
  const std::string &sid = p.sessionId;
  SessionState *sess = sid.empty() ? nullptr : sessions_.Find(sid);
  if (!r.resumed) {  // a preempted request was checked (and its session joined) the first time
    Placement checked = PrepareSession(r, sess);
    if (checked != Placement::Placed) return checked;
  }

  // ---- choose the sequence ----------------------------------------------------------
  Sequence *target = nullptr;
  bool pinned = sess != nullptr && sess->sequence >= 0;
  if (pinned) {
    target = &sequences_[static_cast<size_t>(sess->sequence)];
  } else {
    target = FreeSequence(r.tokens, p.cacheScope);
    if (target == nullptr) target = SpillIdleSession(sid);
    if (target == nullptr) return Placement::Wait;
  }
  if (!cfg_.prefixCache) {
    llama_memory_seq_rm(mem_, target->seq, -1, -1);
    target->tokens.clear();
  }

  // ---- plan and apply the reuse -------------------------------------------------------
  ReuseInputs in = MeasureReuse(r, *target, pinned);
  ReusePlan plan = PlanReuse(in);
  if (plan.readDisk) {
    // The read runs on the I/O thread; the request waits without holding a sequence.
    size_t c = 0;
    DiskTier::Entry *e = tiers_->Disk()->Lookup(r.tokens, &c);
    r.diskPending = true;
    r.diskTokens = e->tokens;
    tiers_->Disk()->Read(r.p->id, *e);
    return Placement::Wait;
  }
  double restoreMs = 0;
  size_t common = ApplyReuse(r, *target, plan, in, &restoreMs);
  // Drop what the prompt does not share; keep one prompt token to decode for logits.
  bool replaced = plan.source == ReuseSource::Shared || plan.source == ReuseSource::Session ||
                  plan.source == ReuseSource::Ram || plan.source == ReuseSource::Disk;
  if (!target->tokens.empty() && !sessions_.IsPinned(target->seq) && !replaced && common < target->tokens.size() / 2) {
    SaveState(*target, "");  // the sequence's old content is about to be lost
  }
  size_t keep = p.prefillOnly ? common : std::min(common, r.tokens.size() - 1);
  if (keep < target->tokens.size()) {
    if (keep == 0 || !llama_memory_seq_rm(mem_, target->seq, static_cast<llama_pos>(keep), -1)) {
      llama_memory_seq_rm(mem_, target->seq, -1, -1);
      keep = 0;
    }
    target->tokens.resize(keep);
  }

  // ---- place --------------------------------------------------------------------------
  if (!sid.empty()) {
    SessionState &s = sessions_.Create(sid);
    sessions_.Pin(sid, target->seq);
    s.busy = true;
    s.scope = p.cacheScope;
    s.lastUsed = Clock::now();
    if (p.sessionTtlMs >= 0) s.ttlMs = p.sessionTtlMs;
  }
  target->req = &r;
  target->scope = p.cacheScope;
  target->lastUsed = Clock::now();
  r.seq = target;
  r.nPast = keep;
  UpdateCounters();
  if (r.resumed) return Placement::Placed;  // its stats describe the first admission
  r.stats.reusedTokens = static_cast<int32_t>(keep);
  r.stats.cacheOutcome = ReuseOutcome(plan, in, keep);
  r.stats.cacheTier = keep == 0 ? "" : ReuseSourceName(plan.source);
  r.stats.restoreMs = restoreMs;
  r.tAdmit = Clock::now();
  r.stats.queuedMs = MsBetween(r.tSubmit, r.tAdmit);
  return Placement::Placed;
}

}  // namespace llamux
