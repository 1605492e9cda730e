#include "engine/admission.h"

#include <algorithm>

#include "engine/command_queue.h"
#include "engine/gauges.h"
#include "engine/lifecycle.h"
#include "engine/output.h"
#include "kv/prefix_retention.h"
#include "kv/reuse.h"
#include "kv/reuse_planner.h"
#include "kv/sessions.h"
#include "kv/state_tiers.h"

namespace llamux {

void Admission::PollDisk() {
  DiskTier *disk = d_.tiers->Disk();
  if (disk == nullptr) return;
  for (auto &res : disk->Poll()) {
    for (auto &w : waiting_) {
      if (w->p->id != res.requestId) continue;
      w->disk.pending = false;
      w->disk.ready = res.ok;
      if (res.ok) w->disk.blob = std::move(res.blob);
      else w->disk.tokens.clear();
    }
  }
  d_.gauges->Update();
}

bool Admission::Admit(std::vector<std::unique_ptr<Request>> &active) {
  bool progressed = false;
  if (d_.sessions->Expire() > 0) d_.gauges->Update();
  PollDisk();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (HeldBack(**it, active)) break;  // a preempted request keeps its place at the head
    Placement pl = TryAdmit(**it);
    if (pl == Placement::Wait) {
      // A request waiting for its own busy session must not block the others.
      const RequestParams &p = *(*it)->p;
      bool sessionWait = ((*it)->disk.pending) || (p.waitForSession && p.session != 0);
      if (!sessionWait) {
        bool anyFree = std::any_of(d_.sequences->begin(), d_.sequences->end(), [](const Sequence &s) { return !s.Busy(); });
        if (!anyFree) break;
      }
      ++it;
      continue;
    }
    d_.queue->Left();
    progressed = true;
    if (pl == Placement::Placed) {
      std::unique_ptr<Request> rp = std::move(*it);
      Request &r = *rp;
      active.push_back(std::move(rp));
      if (r.p->prefillOnly && r.nPast == r.tokens.size()) d_.life->Finish(r, FinishReason::Prefill);
    }
    it = waiting_.erase(it);
  }
  return progressed;
}

void Admission::Requeue(std::vector<std::unique_ptr<Request>> &active) {
  std::vector<std::unique_ptr<Request>> back;
  for (auto &rp : active) {
    if (rp && rp->phase() == Phase::Preempted) back.push_back(std::move(rp));
  }
  if (back.empty()) return;
  active.erase(std::remove(active.begin(), active.end(), nullptr), active.end());
  // oldest first, ahead of requests that were never admitted
  std::sort(back.begin(), back.end(), [](const auto &a, const auto &b) { return a->time.submit > b->time.submit; });
  d_.queue->Returned(static_cast<uint32_t>(back.size()));
  for (auto &rp : back) waiting_.push_front(std::move(rp));
}

void Admission::Cancel(uint64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->p->id != id) continue;
    d_.queue->Left();
    d_.life->FailWaiting(**it, ErrorCode::Aborted, "The request was aborted");
    waiting_.erase(it);
    return;
  }
}

bool Admission::DiskWaits() const {
  return std::any_of(waiting_.begin(), waiting_.end(), [](const auto &w) { return w->disk.pending; });
}

void Admission::FailAll(ErrorCode code, const std::string &message) {
  for (auto &rp : waiting_) d_.life->FailWaiting(*rp, code, message);
  waiting_.clear();
}

// A preempted request waits until another request has left the cache (or none is left
// running), so it does not take the cells back and thrash.
bool Admission::HeldBack(const Request &r, const std::vector<std::unique_ptr<Request>> &active) const {
  if (!r.preempt.resumed || d_.life->Finished() > r.preempt.resumeAfter) return false;
  return std::any_of(active.begin(), active.end(), [](const auto &rp) { return !rp->Done() && rp->Seq() != nullptr; });
}

// A free (unpinned, idle) sequence: the one sharing the longest prefix with the prompt; on
// a tie the one caching the least, so useful prefixes elsewhere survive.
Sequence *Admission::FreeSequence(const std::vector<llama_token> &prompt, const std::string &scope) {
  Sequence *best = nullptr;
  size_t bestCommon = 0;
  for (auto &s : *d_.sequences) {
    if (s.Busy() || s.Pinned()) continue;
    size_t c = s.scope == scope ? std::min(CommonPrefix(s.Tokens(), prompt), s.ExactPrefix()) : 0;
    if (!d_.canTruncate && c < s.Size()) c = s.KeepableAt(c);  // its newest checkpoint at or below c
    if (best == nullptr || c > bestCommon || (c == bestCommon && s.Size() < best->Size())) {
      best = &s;
      bestCommon = c;
    }
  }
  return best;
}

Placement Admission::AdmitEnd(Request &r) {
  d_.sessions->End(r.p->session);
  d_.gauges->Update();
  d_.output->Emit(Event::SessionDone(r.p->id));
  return Placement::Done;
}

Placement Admission::AdmitFork(Request &r) {
  SessionState *from = nullptr;
  Placement checked = d_.sessions->CheckFork(r, &from);
  if (checked != Placement::Placed) return checked;
  Sequence *target = FreeSequence({}, "");
  if (target == nullptr) target = d_.sessions->SpillIdle(from);
  if (target == nullptr) {
    // Every sequence is busy or holds the session forked from (one sequence: always): the fork
    // starts in the RAM tier. Without one, wait only while a running request may free a sequence.
    if (d_.sessions->ForkToRam(r, *from)) {
      d_.gauges->Update();
      return Placement::Done;
    }
    bool anyBusy = std::any_of(d_.sequences->begin(), d_.sequences->end(), [](const Sequence &s) { return s.Busy(); });
    if (anyBusy) return Placement::Wait;
    d_.output->Emit(Event::SessionFailed(r.p->id, ErrorCode::KvCacheFull,
                                         "No sequence is free for the fork and the RAM tier cannot hold it: use more sequences or a RAM tier (cacheRamMb)"));
    return Placement::Done;
  }
  target->SaveIfWorth(*d_.tiers, 0, Overwrite::Fork);
  d_.sessions->Fork(r, *from, *target);
  d_.gauges->Update();
  return Placement::Done;
}

Placement Admission::TryAdmit(Request &r) {
  if (r.disk.pending) return Placement::Wait;
  const RequestParams &p = *r.p;
  if (p.command) return p.command->op == SessionCommand::Op::End ? AdmitEnd(r) : AdmitFork(r);
  SessionState *sess = nullptr;  // resolved once, by Prepare
  Placement checked = d_.sessions->Prepare(r, &sess);
  if (checked == Placement::Wait && sess != nullptr && sess->busy) d_.life->WaitForSession(r);
  if (checked != Placement::Placed) return checked;

  // ---- choose the sequence ----------------------------------------------------------
  Sequence *target = nullptr;
  bool pinned = sess != nullptr && sess->sequence >= 0;
  if (pinned) {
    target = &(*d_.sequences)[static_cast<size_t>(sess->sequence)];
  } else {
    target = FreeSequence(r.tokens, p.cacheScope);
    if (target == nullptr) target = d_.sessions->SpillIdle(sess);
    if (target == nullptr) return Placement::Wait;
  }
  if (!d_.prefixCache) target->Clear();

  // ---- plan and apply the reuse -------------------------------------------------------
  Reuse::Measured measured = d_.reuse->Measure(r, *target, sess, pinned);
  ReusePlan plan = PlanReuse(measured.in);
  if (plan.readDisk) {
    d_.reuse->StartDiskRead(r);
    return Placement::Wait;
  }
  double restoreMs = 0;
  size_t keep = d_.reuse->Apply(r, *target, plan, measured, &restoreMs);

  // ---- place --------------------------------------------------------------------------
  if (p.session != 0) d_.sessions->Join(r, *target);
  target->scope = p.cacheScope;
  target->lastUsed = Clock::now();
  d_.life->Place(r, *target);
  r.nPast = keep;
  PrefixRetention(d_.tiers).Placed(r);
  d_.gauges->Update();
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
