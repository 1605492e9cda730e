// Carrying out a reuse plan: measuring what each KV source shares with a prompt (Measure),
// and making the target sequence hold the planned KV, trimmed to what the prompt keeps
// (Apply). The choice itself is PlanReuse (reuse_planner.h, pure logic). Plain C++, engine
// thread only.
#pragma once
#include <vector>

#include "engine/request_state.h"
#include "kv/reuse_planner.h"
#include "kv/sequence.h"

namespace llamux {

class StateTiers;
struct CacheCounters;
struct CacheEntry;
struct SessionState;

class Reuse {
 public:
  struct Deps {
    bool prefixCache = true;
    bool unifiedKv = true;
    bool canTruncate = true;
    std::vector<Sequence> *sequences = nullptr;
    StateTiers *tiers = nullptr;
    CacheCounters *counters = nullptr;
  };
  Reuse() = default;
  explicit Reuse(const Deps &deps) : d_(deps) {}

  // What each source shares with the prompt, for PlanReuse; nothing changes in between.
  struct Measured {
    ReuseInputs in;
    CacheEntry *spilled = nullptr;  // the session's state in the RAM tier (in.hasSession)
    size_t spilledExact = SIZE_MAX;  // its exact prefix (a shifted session, SessionState::exact)
  };
  // No KV changes. `sess`: the request's session (nullptr when none or new); `pinned`: the
  // target is that session's own sequence.
  Measured Measure(const Request &r, const Sequence &target, const SessionState *sess, bool pinned) const;
  // plan.readDisk: starts the disk read on the I/O thread; the request waits without a sequence.
  void StartDiskRead(Request &r);
  // Makes the target hold the plan's KV, then drops what the prompt does not share (keeping
  // one prompt token to decode for logits unless prefillOnly). Returns the prompt tokens the
  // target holds afterwards (its Size()); on a failed restore the plan becomes None.
  size_t Apply(Request &r, Sequence &target, ReusePlan &plan, const Measured &m, double *restoreMs);

 private:
  Deps d_;
};

}  // namespace llamux
