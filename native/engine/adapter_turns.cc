#include "engine/adapter_turns.h"

namespace llamux {

const AdapterSet &AdapterTurns::Choose(const std::vector<std::unique_ptr<Request>> &active, bool (*wants)(const Request &)) {
  tick_++;
  const Request *pick = nullptr;
  uint64_t pickServed = 0;
  bool several = false;
  for (const auto &rp : active) {
    const Request &r = *rp;
    if (!wants(r)) continue;
    if (pick == nullptr) {
      pick = &r;
      auto it = served_.find(r.p->adapters.key);
      pickServed = it == served_.end() ? 0 : it->second;
      continue;
    }
    if (r.p->adapters.key == pick->p->adapters.key) continue;
    several = true;
    auto it = served_.find(r.p->adapters.key);
    const uint64_t s = it == served_.end() ? 0 : it->second;
    if (s < pickServed) {  // ties: the first in queue order
      pick = &r;
      pickServed = s;
    }
  }
  if (pick == nullptr) {
    chosen_ = AdapterSet();
    return chosen_;
  }
  if (pick->p->adapters.key != chosen_.key) chosen_ = pick->p->adapters;
  if (several || !served_.empty()) {
    served_[chosen_.key] = tick_;
    if (served_.size() > 256) served_.clear();  // keys of finished requests; order restarts
  }
  return chosen_;
}

}  // namespace llamux
