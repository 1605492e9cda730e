// Admission: the requests waiting for a sequence, and placing them. It only orchestrates:
// session commands go to Sessions (sessions.h); a generation is checked by its session, gets a
// target sequence, a reuse plan (reuse_planner.h) that Reuse (reuse.h) measures and carries
// out, and is placed through Lifecycle. The request's session id is resolved once, here.
// Preempted requests come back here, ahead of the others. Plain C++, engine thread only.
#pragma once
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/request_state.h"

namespace llamux {

class CommandQueue;
class Gauges;
class Lifecycle;
class Output;
class Reuse;
class Sessions;
class StateTiers;

class Admission {
 public:
  struct Deps {
    std::vector<Sequence> *sequences = nullptr;
    Sessions *sessions = nullptr;
    Reuse *reuse = nullptr;
    StateTiers *tiers = nullptr;
    Lifecycle *life = nullptr;
    CommandQueue *queue = nullptr;  // its waiting count
    Output *output = nullptr;
    Gauges *gauges = nullptr;
    bool prefixCache = false;
    bool canTruncate = true;
  };
  explicit Admission(const Deps &d) : d_(d) {}

  void Add(std::unique_ptr<Request> r) { waiting_.push_back(std::move(r)); }
  // Places what it can, in order, into `active`. True when a request was placed or ended.
  bool Admit(std::vector<std::unique_ptr<Request>> &active);
  // Moves this tick's preempted requests from `active` back to the head of the queue.
  void Requeue(std::vector<std::unique_ptr<Request>> &active);
  // A cancel for a request still waiting (never placed, preempted, or reading from disk).
  void Cancel(uint64_t id);
  // A disk read of some waiting request is in flight.
  bool DiskWaits() const;
  // The context closes: every waiting request ends with `code`.
  void FailAll(ErrorCode code, const std::string &message);

 private:
  Placement TryAdmit(Request &r);
  Placement AdmitEnd(Request &r);
  Placement AdmitFork(Request &r);
  Sequence *FreeSequence(const std::vector<llama_token> &prompt, const std::string &scope);
  bool HeldBack(const Request &r, const std::vector<std::unique_ptr<Request>> &active) const;
  void PollDisk();

  Deps d_;
  std::deque<std::unique_ptr<Request>> waiting_;
};

}  // namespace llamux
