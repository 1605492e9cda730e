// A full KV cache: when llama_decode finds no room and no idle sequence holds KV to drop,
// one running request gives up its cells so the others finish. The victim is the youngest
// request (latest submitted); it keeps everything it produced, waits at the head of the
// queue until another request has finished, and is re-admitted with prompt + generated
// tokens, so its output continues exactly where it stopped (the recompute reuses whatever
// prefix the caches still hold). Only a request alone in the cache that still does not fit
// fails, with KV_CACHE_FULL. Part of the Scheduler class (scheduler.h).
#include <algorithm>

#include "engine/batch.h"
#include "engine/scheduler.h"

namespace llamux {

void Scheduler::OnKvFull() {
  if (Batch::FreeIdle(sequences_)) return;  // retry next tick with the idle KV gone
  Request *victim = nullptr;
  size_t holding = 0;
  for (auto &rp : active_) {
    Request &r = *rp;
    if (r.done || r.seq == nullptr) continue;
    holding++;
    if (victim == nullptr || r.time.submit > victim->time.submit) victim = &r;
  }
  if (victim == nullptr) return;
  if (holding == 1) {
    Fail(*victim, ErrorCode::KvCacheFull,
         "The KV cache is full: this request alone needs more than the context's free cells; "
         "use a larger contextSize, fewer parallel sequences, or a shorter prompt or maxTokens");
    return;
  }
  Preempt(*victim);
}

void Scheduler::Preempt(Request &r) {
  Sequence *s = r.seq;
  s->Clear();
  // A session request gives its sequence up too; the session stays busy (others keep
  // waiting for it) and is pinned again when the request comes back.
  sessions_.Yield(*s);
  s->req = nullptr;
  s->lastUsed = Clock::now();
  r.seq = nullptr;
  r.nPast = 0;
  r.tick.count = 0;
  r.tick.logitIdx = -1;
  r.preempt.requeue = true;
  r.preempt.resumed = true;
  r.preempt.resumeAfter = finished_;
  counters_.preemptions++;
  UpdateCounters();
}

// Moves this tick's victims from the active list back to the head of the wait queue,
// oldest first, ahead of requests that were never admitted.
void Scheduler::RequeuePreempted() {
  std::vector<std::unique_ptr<Request>> back;
  for (auto &rp : active_) {
    if (rp && rp->preempt.requeue && !rp->done) back.push_back(std::move(rp));
  }
  if (back.empty()) return;
  active_.erase(std::remove(active_.begin(), active_.end(), nullptr), active_.end());
  std::sort(back.begin(), back.end(), [](const auto &a, const auto &b) { return a->time.submit > b->time.submit; });
  {
    std::lock_guard<std::mutex> lk(mu_);
    waitingCount_ += static_cast<uint32_t>(back.size());
  }
  for (auto &rp : back) {
    rp->preempt.requeue = false;
    waiting_.push_front(std::move(rp));
  }
}

// A preempted request waits until another request has left the cache (or none is left
// running), so it does not take the cells back and thrash.
bool Scheduler::HeldBack(const Request &r) const {
  if (!r.preempt.resumed || finished_ > r.preempt.resumeAfter) return false;
  for (auto &rp : active_) {
    if (!rp->done && rp->seq != nullptr) return true;
  }
  return false;
}

}  // namespace llamux
