#include "kv/prefix_retention.h"

#include <algorithm>

#include "engine/request_state.h"
#include "kv/state_tiers.h"

namespace llamux {

namespace {
Clock::time_point Deadline(const RequestParams::RetainPoint &p) { return Clock::now() + std::chrono::milliseconds(p.ms); }
}  // namespace

size_t PrefixRetention::Chunk(const Request &r, size_t n) {
  const auto &points = r.p->retain;
  if (r.retain.next >= points.size() || r.nGenerated > 0) return n;
  size_t stop = points[r.retain.next].tokens;
  if (r.nPast < stop && r.nPast + n > stop) return stop - r.nPast;
  return n;
}

void PrefixRetention::Placed(Request &r) {
  const auto &points = r.p->retain;
  while (r.retain.next < points.size() && points[r.retain.next].tokens <= r.nPast) {
    const auto &p = points[r.retain.next];
    // Read from the cache: the saved state of exactly this prefix (if one holds it) stays
    // another ttl. A prefix served from live KV only has nothing saved to extend.
    std::vector<llama_token> prefix(r.tokens.begin(), r.tokens.begin() + static_cast<std::ptrdiff_t>(p.tokens));
    tiers_->Retain(prefix, Deadline(p));
    r.retain.next++;
  }
}

void PrefixRetention::Committed(Request &r) {
  const auto &points = r.p->retain;
  Sequence *s = r.Seq();
  if (s == nullptr || r.nGenerated > 0) return;
  while (r.retain.next < points.size() && points[r.retain.next].tokens <= r.nPast) {
    const auto &p = points[r.retain.next];
    r.retain.next++;
    if (p.tokens != r.nPast) continue;  // passed without a stop (cannot happen: Chunk stops there)
    if (tiers_->SaveRetained(*s, Deadline(p)) != 0) {
      r.stats.retainedTokens = static_cast<int32_t>(p.tokens);
    } else {
      r.stats.retainRefused++;
    }
  }
}

}  // namespace llamux
