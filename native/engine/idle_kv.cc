#include "engine/idle_kv.h"

#include <algorithm>

#include "engine/command_queue.h"
#include "engine/gauges.h"
#include "kv/sessions.h"
#include "kv/state_tiers.h"

namespace llamux {

void IdleKv::SpillTaxing(const std::vector<std::unique_ptr<Request>> &active) {
  if (d_.spillMs == 0 || !d_.unifiedKv || d_.tiers->Ram() == nullptr) return;
  size_t activeCells = 0;
  bool decoding = false;
  for (auto &rp : active) {
    const Request &r = *rp;
    if (r.Done() || r.Seq() == nullptr) continue;
    activeCells += r.tokens.size();
    decoding = decoding || (r.nGenerated > 0 && !r.Paused());
  }
  if (!decoding) return;
  Clock::time_point now = Clock::now();
  size_t idleCells = 0;
  for (auto &s : *d_.sequences) {
    if (!s.Busy()) idleCells += s.Size();
  }
  if (idleCells <= activeCells) return;  // the window at most doubles: not worth a copy
  for (auto &s : *d_.sequences) {
    if (s.Busy() || s.Empty() || MsBetween(s.lastUsed, now) < d_.spillMs) continue;
    // the RAM tier did not take it: keep the KV
    if (s.Pinned()) {
      if (!d_.sessions->Spill(s)) continue;
    } else {
      if (!s.Save(*d_.tiers, "")) continue;
      s.Clear();
    }
    d_.counters->idleSpills++;
  }
  d_.gauges->Update();
}

void IdleKv::WriteDirty(CommandQueue &queue) {
  Clock::time_point now = Clock::now();
  for (auto &s : *d_.sequences) {
    if (!s.diskDirty || s.Busy() || MsBetween(s.lastUsed, now) < kWriteThroughGraceMs) continue;
    if (queue.Ready()) return;
    s.diskDirty = false;
    d_.tiers->SaveToDisk(s);
  }
}

bool IdleKv::AnyDirty() const {
  return std::any_of(d_.sequences->begin(), d_.sequences->end(), [](const Sequence &s) { return s.diskDirty; });
}

}  // namespace llamux
