#include "engine/lifecycle.h"

#include <cassert>

#include "engine/gauges.h"
#include "engine/output.h"
#include "kv/sessions.h"
#include "kv/state_tiers.h"

namespace llamux {

const char *PhaseName(Phase p) {
  switch (p) {
    case Phase::Queued: return "queued";
    case Phase::WaitingForSession: return "waiting for session";
    case Phase::Prefilling: return "prefilling";
    case Phase::Decoding: return "decoding";
    case Phase::Paused: return "paused";
    case Phase::Preempted: return "preempted";
    case Phase::Done: return "done";
  }
  return "?";
}

namespace {

bool Allowed(Phase from, Phase to) {
  if (from == Phase::Done) return false;
  if (to == Phase::Done) return true;
  switch (to) {
    case Phase::WaitingForSession:
      return from == Phase::Queued || from == Phase::WaitingForSession || from == Phase::Preempted;
    case Phase::Prefilling:
      return from == Phase::Queued || from == Phase::WaitingForSession || from == Phase::Preempted || from == Phase::Paused;
    case Phase::Decoding: return from == Phase::Prefilling || from == Phase::Paused;
    case Phase::Paused:
      return from == Phase::Prefilling || from == Phase::Decoding || from == Phase::Queued ||
             from == Phase::WaitingForSession || from == Phase::Preempted;
    case Phase::Preempted: return from == Phase::Prefilling || from == Phase::Decoding || from == Phase::Paused;
    default: return false;
  }
}

}  // namespace

void Lifecycle::To(Request &r, Phase next) {
  assert(Allowed(r.phase_, next));
  if (!Allowed(r.phase_, next)) return;  // release builds: an impossible change is ignored
  r.phase_ = next;
}

void Lifecycle::WaitForSession(Request &r) {
  if (r.phase_ == Phase::Queued) To(r, Phase::WaitingForSession);
}

void Lifecycle::Place(Request &r, Sequence &s) {
  s.Attach(r);
  To(r, r.pauseAsked_ ? Phase::Paused : Phase::Prefilling);
}

void Lifecycle::FirstToken(Request &r) {
  if (r.phase_ == Phase::Prefilling) To(r, Phase::Decoding);
}

void Lifecycle::SetPaused(Request &r, bool paused) {
  if (r.Done()) return;
  r.pauseAsked_ = paused;
  if (paused && r.Running()) To(r, Phase::Paused);
  if (!paused && r.phase_ == Phase::Paused) To(r, r.nGenerated > 0 ? Phase::Decoding : Phase::Prefilling);
}

void Lifecycle::Preempt(Request &r) {
  Sequence *s = r.Seq();
  s->Clear();
  // A session request gives its sequence up too; the session stays busy (others keep
  // waiting for it) and is pinned again when the request comes back.
  d_.sessions->Yield(*s);
  s->Detach();
  s->lastUsed = Clock::now();
  r.nPast = 0;
  r.tick.count = 0;
  r.tick.logitIdx = -1;
  r.preempt.resumed = true;
  r.preempt.resumeAfter = finished_;
  To(r, Phase::Preempted);
  d_.counters->preemptions++;
  d_.gauges->Update();
}

void Lifecycle::Finish(Request &r, FinishReason reason) {
  if (r.Done()) return;
  d_.output->Finish(r, reason);
  To(r, Phase::Done);
  Release(r, true);
}

void Lifecycle::Fail(Request &r, ErrorCode code, const std::string &message) {
  if (r.Done()) return;
  d_.output->Fail(r, code, message);
  To(r, Phase::Done);
  Release(r, false);
}

void Lifecycle::FailWaiting(Request &r, ErrorCode code, const std::string &message) {
  if (r.Done()) return;
  // preempted off its session's sequence: the session is free again (its KV is gone)
  if (r.preempt.resumed && r.session != nullptr) r.session->busy = false;
  if (!r.preempt.resumed && code == ErrorCode::Aborted) r.stats.queuedMs = MsBetween(r.time.submit, Clock::now());
  d_.output->Emit(r.p->command ? Event::SessionFailed(r.p->id, code, message) : Event::Failed(r.p->id, code, message, r.stats));
  To(r, Phase::Done);
}

void Lifecycle::Release(Request &r, bool keepKv) {
  Sequence *s = r.Seq();
  if (s == nullptr) return;
  finished_++;
  bool pinned = s->Pinned();
  // The sequence's token list already mirrors its KV (tokens below nPast). A pinned
  // session keeps that KV even after an abort; otherwise a failed request's KV goes.
  if (!keepKv && !pinned) s->Clear();
  // a turn boundary: the end of a request (recurrent/hybrid memories; no-op otherwise)
  if (keepKv || pinned) s->TakeCheckpoint();
  s->lastUsed = Clock::now();
  if (pinned) d_.sessions->Leave(r, *s, keepKv);
  if (r.p->prefillOnly && keepKv && !pinned) {
    s->Save(*d_.tiers, "");  // a warmed prefix survives reuse
  } else if (keepKv && d_.diskWriteThrough && d_.tiers->Disk() != nullptr) {
    s->diskDirty = true;  // copied out when the engine idles (IdleKv::WriteDirty), never mid-decode
  }
  s->Detach();
  d_.gauges->Update();
}

}  // namespace llamux
