#include "kv/reuse_planner.h"

#include <algorithm>

namespace llamux {

const char *ReuseSourceName(ReuseSource s) {
  switch (s) {
    case ReuseSource::None: return "";
    case ReuseSource::Live: return "live";
    case ReuseSource::Session: return "ram";  // a spilled session lives in the RAM tier
    case ReuseSource::Shared: return "shared";
    case ReuseSource::Ram: return "ram";
    case ReuseSource::Disk: return "disk";
  }
  return "";
}

ReusePlan PlanReuse(const ReuseInputs &in) {
  ReusePlan plan;
  size_t common = in.liveCommon;
  // A memory that cannot drop a tail reuses a sequence only when the prompt extends all of it.
  // With checkpoints the commons are measured at the restorable positions already.
  if (!in.canTruncate && !in.checkpoints && common < in.liveTokens) common = 0;
  plan.liveCommon = common;
  if (common > 0) {
    plan.source = ReuseSource::Live;
    plan.common = common;
  }
  if (!in.enabled) return plan;

  // The disk tier is decided before anything changes: a read makes the request wait without
  // a sequence, so nothing may have been restored or copied for it yet. It must beat every
  // other source, measured the same way.
  bool partialOk = in.canTruncate || in.checkpoints;
  if (in.hasDisk && partialOk && !in.diskReady) {
    size_t best = common;
    if (in.hasSession) best = std::max(best, in.sessionCommon);
    if (in.unifiedKv) {
      for (size_t c : in.sequenceCommon) best = std::max(best, c);
    }
    if (in.hasRam) best = std::max(best, in.ramCommon);
    if (in.diskCommon >= best + in.minGain) {
      plan.readDisk = true;
      plan.source = ReuseSource::Disk;
      plan.common = in.diskCommon;
      return plan;
    }
  }
  if (in.hasSession) {
    size_t c = in.sessionCommon;
    if (c > plan.common && (partialOk || c == in.sessionTokens)) {
      plan.source = ReuseSource::Session;
      plan.common = c;
    }
  }
  if (in.unifiedKv && partialOk) {
    int32_t from = -1;
    size_t fromCommon = plan.common;
    for (size_t i = 0; i < in.sequenceCommon.size(); i++) {
      if (static_cast<int32_t>(i) == in.target) continue;
      if (in.sequenceCommon[i] >= fromCommon + in.minGain) {
        from = static_cast<int32_t>(i);
        fromCommon = in.sequenceCommon[i];
      }
    }
    if (from >= 0) {
      plan.source = ReuseSource::Shared;
      plan.common = fromCommon;
      plan.shareFrom = from;
    }
  }
  if (in.hasRam && partialOk && in.ramCommon >= plan.common + in.minGain) {
    plan.source = ReuseSource::Ram;
    plan.common = in.ramCommon;
    plan.shareFrom = -1;
  }
  if (in.diskReady && in.diskReadyCommon >= plan.common + in.minGain) {
    plan.source = ReuseSource::Disk;
    plan.common = in.diskReadyCommon;
    plan.shareFrom = -1;
  }
  return plan;
}

const char *ReuseOutcome(const ReusePlan &plan, const ReuseInputs &in, size_t kept) {
  if (kept == 0) return "cold";
  switch (plan.source) {
    case ReuseSource::None: return "cold";
    case ReuseSource::Live:
      if (in.pinned && plan.common == in.liveTokens) return "sticky";
      return kept + 1 >= in.promptTokens ? "exact" : "partial";
    case ReuseSource::Shared: return "partial";
    case ReuseSource::Session:
    case ReuseSource::Ram:
    case ReuseSource::Disk: return "restored";
  }
  return "cold";
}

}  // namespace llamux
