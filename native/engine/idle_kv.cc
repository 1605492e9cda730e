// Idle KV must not tax running requests. With a unified KV cache llama.cpp attends over
// every cell up to the highest one in use, so a conversation or prefix that sits idle in
// the cache widens the attention window of every token the other sequences decode (a
// 2,000-token idle session makes a short request's decode attend over 2,000 masked cells).
// While requests decode, idle sequences unused for `idleKvSpillMs` whose cells outnumber the
// running ones move to the RAM tier (sessions come back transparently, prefixes by lookup)
// and their cells are freed. Nothing is dropped unless the RAM tier took it. Off by default:
// the copy stalls the engine (~0.5 s for a 2,000-token state of the 250 M bench model), and
// llamux's llama.cpp patch fa-masked-kv already keeps masked cells from costing decode time
// (kept: 0.99x of no idle session, bench attention suite, idle-KV table).
// Part of the Scheduler class (scheduler.h).
#include "engine/scheduler.h"

namespace llamux {

void Scheduler::SpillTaxingIdleKv() {
  if (cfg_.idleKvSpillMs == 0 || !cfg_.unifiedKv || tiers_->Ram() == nullptr) return;
  size_t activeCells = 0;
  bool decoding = false;
  for (auto &rp : active_) {
    const Request &r = *rp;
    if (r.done || r.seq == nullptr) continue;
    activeCells += r.tokens.size();
    decoding = decoding || (r.nGenerated > 0 && !r.paused);
  }
  if (!decoding) return;
  Clock::time_point now = Clock::now();
  size_t idleCells = 0;
  for (auto &s : sequences_) {
    if (s.req == nullptr) idleCells += s.Size();
  }
  if (idleCells <= activeCells) return;  // the window at most doubles: not worth a copy
  for (auto &s : sequences_) {
    if (s.req != nullptr || s.Empty() || MsBetween(s.lastUsed, now) < cfg_.idleKvSpillMs) continue;
    // the RAM tier did not take it: keep the KV
    if (s.Pinned()) {
      if (!sessions_.Spill(s)) continue;
    } else {
      if (!s.Save(*tiers_, "")) continue;
      s.Clear();
    }
    counters_.idleSpills++;
  }
  UpdateCounters();
}

}  // namespace llamux
