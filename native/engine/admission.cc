// Admission: placing a waiting request on a sequence. It only orchestrates: session commands
// go to Sessions (sessions.h), a generation is checked by its session, gets a target
// sequence, a reuse plan (reuse_planner.h) that Reuse (reuse.h) measures and carries out, and
// joins its session. The request's session id is resolved once, here. Part of the Scheduler
// class (scheduler.h).
#include <algorithm>

#include "engine/scheduler.h"

namespace llamux {

// A free (unpinned, idle) sequence: the one sharing the longest prefix with the prompt; on
// a tie the one caching the least, so useful prefixes elsewhere survive.
Sequence *Scheduler::FreeSequence(const std::vector<llama_token> &prompt, const std::string &scope) {
  Sequence *best = nullptr;
  size_t bestCommon = 0;
  for (auto &s : sequences_) {
    if (s.req != nullptr || s.Pinned()) continue;
    size_t c = s.scope == scope ? CommonPrefix(s.Tokens(), prompt) : 0;
    if (!canTruncate_ && c < s.Size()) c = s.KeepableAt(c);  // its newest checkpoint at or below c
    if (best == nullptr || c > bestCommon || (c == bestCommon && s.Size() < best->Size())) {
      best = &s;
      bestCommon = c;
    }
  }
  return best;
}

Placement Scheduler::AdmitEnd(Request &r) {
  sessions_.End(r.p->sessionId);
  UpdateCounters();
  output_.Emit(Event::SessionDone(r.p->id));
  return Placement::Done;
}

Placement Scheduler::AdmitFork(Request &r) {
  SessionState *from = nullptr;
  Placement checked = sessions_.CheckFork(r, &from);
  if (checked != Placement::Placed) return checked;
  Sequence *target = FreeSequence({}, "");
  if (target == nullptr) target = sessions_.SpillIdle(from);
  if (target == nullptr) return Placement::Wait;
  target->SaveIfWorth(*tiers_, 0, Overwrite::Fork);
  sessions_.Fork(r, *from, *target);
  UpdateCounters();
  return Placement::Done;
}

Placement Scheduler::TryAdmit(Request &r) {
  if (r.disk.pending) return Placement::Wait;
  const RequestParams &p = *r.p;
  if (p.command) return p.command->op == SessionCommand::Op::End ? AdmitEnd(r) : AdmitFork(r);
  SessionState *sess = nullptr;  // resolved once, by Prepare
  Placement checked = sessions_.Prepare(r, &sess);
  if (checked != Placement::Placed) return checked;

  // ---- choose the sequence ----------------------------------------------------------
  Sequence *target = nullptr;
  bool pinned = sess != nullptr && sess->sequence >= 0;
  if (pinned) {
    target = &sequences_[static_cast<size_t>(sess->sequence)];
  } else {
    target = FreeSequence(r.tokens, p.cacheScope);
    if (target == nullptr) target = sessions_.SpillIdle(sess);
    if (target == nullptr) return Placement::Wait;
  }
  if (!cfg_.prefixCache) target->Clear();

  // ---- plan and apply the reuse -------------------------------------------------------
  Reuse::Measured measured = reuse_.Measure(r, *target, sess, pinned);
  ReusePlan plan = PlanReuse(measured.in);
  if (plan.readDisk) {
    reuse_.StartDiskRead(r);
    return Placement::Wait;
  }
  double restoreMs = 0;
  size_t keep = reuse_.Apply(r, *target, plan, measured, &restoreMs);

  // ---- place --------------------------------------------------------------------------
  if (!p.sessionId.empty()) sessions_.Join(r, *target);
  target->req = &r;
  target->scope = p.cacheScope;
  target->lastUsed = Clock::now();
  r.seq = target;
  r.nPast = keep;
  UpdateCounters();
  if (r.preempt.resumed) return Placement::Placed;  // its stats describe the first admission
  r.stats.reusedTokens = static_cast<int32_t>(keep);
  r.stats.cacheOutcome = ReuseOutcome(plan, measured.in, keep);
  r.stats.cacheTier = keep == 0 ? "" : ReuseSourceName(plan.source);
  r.stats.restoreMs = restoreMs;
  r.time.admit = Clock::now();
  r.stats.queuedMs = MsBetween(r.time.submit, r.time.admit);
  return Placement::Placed;
}

}  // namespace llamux
