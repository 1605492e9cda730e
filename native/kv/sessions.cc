#include "kv/sessions.h"

#include "engine/context_shift.h"

#include <chrono>

#include "engine/output.h"
#include "kv/reuse_planner.h"
#include "engine/gauges.h"  // CacheCounters
#include "engine/request_state.h"
#include "kv/state_tiers.h"

namespace llamux {

// ---- SessionTable -------------------------------------------------------------------------

SessionState *SessionTable::Find(SessionHandle h) {
  auto it = sessions_.find(h);
  return it == sessions_.end() ? nullptr : &it->second;
}

SessionState &SessionTable::Create(SessionHandle h, const std::string &name) {
  SessionState &s = sessions_[h];
  s.handle = h;
  if (s.name.empty()) s.name = name;
  return s;
}

void SessionTable::Pin(SessionState &s, Sequence &seq) {
  if (s.sequence == seq.Id() && seq.session_ == s.handle) return;
  if (s.sequence >= 0) At(s.sequence).session_ = 0;
  Unpin(seq);
  s.sequence = seq.Id();
  seq.session_ = s.handle;
}

void SessionTable::Unpin(Sequence &seq) {
  if (seq.session_ == 0) return;
  auto it = sessions_.find(seq.session_);
  if (it != sessions_.end()) it->second.sequence = -1;
  seq.session_ = 0;
}

void SessionTable::Erase(SessionHandle h) {
  auto it = sessions_.find(h);
  if (it == sessions_.end()) return;
  if (it->second.sequence >= 0) At(it->second.sequence).session_ = 0;
  sessions_.erase(it);
}

std::vector<SessionHandle> SessionTable::Expired(Clock::time_point now, uint32_t defaultTtlMs) const {
  std::vector<SessionHandle> out;
  for (const auto &kv : sessions_) {
    double idle = std::chrono::duration<double, std::milli>(now - kv.second.lastUsed).count();
    double ttl = kv.second.ttlMs >= 0 ? static_cast<double>(kv.second.ttlMs) : defaultTtlMs;
    if (!kv.second.busy && idle > ttl) out.push_back(kv.first);
  }
  return out;
}

size_t SessionTable::PinnedCount() const {
  size_t n = 0;
  if (sequences_ != nullptr) {
    for (const auto &s : *sequences_) n += s.Pinned() ? 1 : 0;
  }
  return n;
}

// ---- a generation on a session ------------------------------------------------------------

Placement Sessions::Prepare(Request &r, SessionState **out) {
  const RequestParams &p = *r.p;
  const std::string &sid = p.sessionName;
  if (r.preempt.resumed) {  // checked (and its session joined) the first time
    *out = r.session;
    return Placement::Placed;
  }
  SessionState *sess = p.session == 0 ? nullptr : table_.Find(p.session);
  *out = sess;
  auto fail = [&](ErrorCode code, const std::string &message) {
    d_.output->Emit(Event::Failed(p.id, code, message, r.stats));
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
  r.nPrompt = r.tokens.size();
  FitPrompt(r, d_.sequenceContextSize);  // overflow shift/reprefill: the window that fits
  if (r.tokens.size() >= d_.sequenceContextSize) {
    return fail(ErrorCode::ContextOverflow, "The session plus the tail has " + std::to_string(r.tokens.size()) +
                                                " tokens but a sequence of this context holds " +
                                                std::to_string(d_.sequenceContextSize));
  }
  r.nPrompt = r.tokens.size();
  r.stats.promptTokens = static_cast<int32_t>(r.nPrompt);
  return Placement::Placed;
}

void Sessions::Join(Request &r, Sequence &seq) {
  const RequestParams &p = *r.p;
  SessionState &s = table_.Create(p.session, p.sessionName);
  table_.Pin(s, seq);
  s.busy = true;
  s.scope = p.cacheScope;
  s.lastUsed = Clock::now();
  if (p.sessionTtlMs >= 0) s.ttlMs = p.sessionTtlMs;
  r.session = &s;
}

void Sessions::Leave(Request &r, const Sequence &seq, bool committed) {
  SessionState *sess = r.session;
  r.session = nullptr;
  if (sess == nullptr) return;
  sess->busy = false;
  sess->lastUsed = seq.lastUsed;
  if (committed) sess->transcript = r.tokens;  // prompt + generated (EOG excluded)
  sess->exact = seq.Shifted() ? seq.ExactPrefix() : SIZE_MAX;
  if (sess->endAfter) {
    Forget(sess->handle);  // destroys the state
  }
}

// ---- session commands ---------------------------------------------------------------------

void Sessions::End(SessionHandle h) {
  SessionState *sess = table_.Find(h);
  if (sess != nullptr && sess->busy) {
    sess->endAfter = true;
  } else {
    Forget(h);
  }
}

Placement Sessions::CheckFork(const Request &r, SessionState **from) {
  const RequestParams &p = *r.p;
  *from = table_.Find(p.command->from);
  if (*from == nullptr) {
    d_.output->Emit(Event::SessionFailed(p.id, ErrorCode::InvalidArgument, "Unknown session: the one to fork has not run a request"));
    return Placement::Done;
  }
  if (table_.Find(p.session) != nullptr) {
    d_.output->Emit(Event::SessionFailed(p.id, ErrorCode::InvalidArgument, "Session \"" + p.sessionName + "\" already exists"));
    return Placement::Done;
  }
  if ((*from)->busy) {
    if (p.waitForSession) return Placement::Wait;
    d_.output->Emit(Event::SessionFailed(p.id, ErrorCode::SessionBusy, "Session \"" + (*from)->name + "\" is running a request"));
    return Placement::Done;
  }
  return Placement::Placed;
}

void Sessions::Fork(const Request &r, const SessionState &from, Sequence &target) {
  const RequestParams &p = *r.p;
  RamTier *ram = d_.tiers->Ram();
  if (from.sequence >= 0) {
    target.ShareFrom((*d_.sequences)[static_cast<size_t>(from.sequence)], SIZE_MAX);  // shares cells (unified KV)
  } else {
    target.Clear();
    double ms = 0;
    if (CacheEntry *e = ram != nullptr ? ram->FindSession(SessionKey(from.handle)) : nullptr) {
      if (d_.tiers->Restore(target, e->tokens, e->blob, &ms)) target.MarkShifted(from.exact);
    }
  }
  target.scope = from.scope;
  std::vector<llama_token> transcript = from.transcript;
  std::string scope = from.scope;
  SessionState &dst = table_.Create(p.session, p.sessionName);
  dst.scope = std::move(scope);
  dst.transcript = std::move(transcript);
  dst.lastUsed = Clock::now();
  dst.ttlMs = p.sessionTtlMs;
  dst.exact = from.exact;
  table_.Pin(dst, target);
  target.lastUsed = dst.lastUsed;
  d_.output->Emit(Event::SessionDone(p.id));
}

bool Sessions::ForkToRam(const Request &r, const SessionState &from) {
  const RequestParams &p = *r.p;
  RamTier *ram = d_.tiers->Ram();
  if (ram == nullptr) return false;
  const std::string key = SessionKey(p.session);
  if (from.sequence >= 0) {
    if (!(*d_.sequences)[static_cast<size_t>(from.sequence)].Save(*d_.tiers, key)) return false;
  } else {
    CacheEntry *e = ram->FindSession(SessionKey(from.handle));
    if (e == nullptr || !ram->Insert(e->tokens, e->blob, key)) return false;
  }
  SessionState &dst = table_.Create(p.session, p.sessionName);
  dst.scope = from.scope;
  dst.transcript = from.transcript;
  dst.lastUsed = Clock::now();
  dst.ttlMs = p.sessionTtlMs;
  dst.exact = from.exact;
  d_.counters->spills++;
  d_.output->Emit(Event::SessionDone(p.id));
  return true;
}

// ---- keeping the table small --------------------------------------------------------------

Sequence *Sessions::SpillIdle(const SessionState *keep) {
  Sequence *victim = nullptr;
  for (auto &s : *d_.sequences) {
    if (s.Busy() || !s.Pinned() || (keep != nullptr && s.Session() == keep->handle)) continue;
    if (victim == nullptr || s.lastUsed < victim->lastUsed) victim = &s;
  }
  if (victim == nullptr) return nullptr;
  victim->Save(*d_.tiers, SessionKey(victim->Session()));  // if it does not fit, the session comes back cold
  table_.Unpin(*victim);
  victim->Clear();
  d_.counters->spills++;
  return victim;
}

bool Sessions::Spill(Sequence &seq) {
  if (!seq.Save(*d_.tiers, SessionKey(seq.Session()))) return false;
  table_.Unpin(seq);
  seq.Clear();
  d_.counters->spills++;
  return true;
}

size_t Sessions::Expire() {
  Clock::time_point now = Clock::now();
  if (MsBetween(lastExpiry_, now) < 1000) return 0;
  lastExpiry_ = now;
  std::vector<SessionHandle> expired = table_.Expired(now, d_.defaultTtlMs);
  for (SessionHandle h : expired) Forget(h);
  return expired.size();
}

void Sessions::Forget(SessionHandle h) {
  if (table_.Find(h) == nullptr) return;
  table_.Erase(h);  // a pinned sequence's KV stays as a plain cache
  if (RamTier *ram = d_.tiers->Ram()) {
    if (CacheEntry *e = ram->FindSession(SessionKey(h))) ram->Erase(e->id);
  }
}

}  // namespace llamux
