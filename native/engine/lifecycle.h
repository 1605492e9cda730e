// Lifecycle: the one place a request changes phase (request_state.h has the diagram), and what
// each change carries with it: the sequence link (Sequence::Attach/Detach), the session's
// turn, the KV kept or dropped, the final event. Every other part asks this class; none
// writes a request's phase or its sequence by hand. Plain C++, engine thread only.
#pragma once
#include <cstdint>
#include <string>

#include "engine/errors.h"
#include "engine/finish_reason.h"
#include "engine/request_state.h"

namespace llamux {

class Gauges;
class Output;
class Sessions;
class StateTiers;
struct CacheCounters;

class Lifecycle {
 public:
  struct Deps {
    Output *output = nullptr;
    Sessions *sessions = nullptr;
    StateTiers *tiers = nullptr;
    Gauges *gauges = nullptr;
    CacheCounters *counters = nullptr;
    bool diskWriteThrough = false;  // a finished request's KV is written to disk when the engine idles
  };
  explicit Lifecycle(const Deps &d) : d_(d) {}

  // ---- waiting ----------------------------------------------------------------------------
  // Its session is busy with another request.
  void WaitForSession(Request &r);
  // Takes `s` (attached): it prefills, or stays paused when JS paused it before.
  void Place(Request &r, Sequence &s);

  // ---- running ----------------------------------------------------------------------------
  // Its first token was sampled: Prefilling -> Decoding.
  void FirstToken(Request &r);
  // JS paused or resumed its stream: held out of the batch (a prompt still prefills).
  void SetPaused(Request &r, bool paused);
  // A full KV cache: it gives its sequence up and waits to be placed again, every token kept.
  void Preempt(Request &r);

  // ---- ends -------------------------------------------------------------------------------
  // eog | stop | length | tool call | prefill: the KV keeps what was committed.
  void Finish(Request &r, FinishReason reason);
  // An error or abort: the KV of an unpinned sequence goes.
  void Fail(Request &r, ErrorCode code, const std::string &message);
  // A request that never held a sequence (cancelled while waiting, or the context closed).
  void FailWaiting(Request &r, ErrorCode code, const std::string &message);

  // Requests that left a sequence by finishing or failing (preempted requests wait for it).
  uint64_t Finished() const { return finished_; }

 private:
  static void To(Request &r, Phase next);  // the one writer of Request::phase_
  void Release(Request &r, bool keepKv);

  Deps d_;
  uint64_t finished_ = 0;
};

}  // namespace llamux
