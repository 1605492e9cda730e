// Where a request's prompt KV comes from. Pure logic (no llama.cpp, no Node-API): the
// scheduler measures what each source shares with the prompt, PlanReuse picks one, and the
// scheduler carries the plan out. The native test hook `planReuse` (native/testing/testing.cc)
// exposes it to test/native/reuse-planner.test.ts.
//
// Sources, in the order they are weighed (a later one must beat the best so far):
//   live     the target sequence's own KV (the pinned session's, or a free sequence's)
//   session  the request's spilled session, saved in the RAM tier (any gain; whole state
//            only when the memory cannot truncate and keeps no checkpoints)
//   shared   another sequence's KV, copied by cell tags (unified KV only; >= minGain; with
//            checkpoints: the whole sequence, then cut back to one of its checkpoints)
//   ram      the RAM tier's longest prefix entry (>= minGain)
//   disk     the disk tier: read on the I/O thread first (the request waits), then
//            restored when the read is back (>= minGain)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace llamux {

enum class ReuseSource { None, Live, Session, Shared, Ram, Disk };

const char *ReuseSourceName(ReuseSource s);  // "" for None, else the cache tier name

struct ReuseInputs {
  bool enabled = true;      // the context's prefixCache option
  bool canTruncate = true;  // the memory can drop a sequence's tail (not recurrent/hybrid)
  // The memory cannot drop a tail but restores checkpoints: the live / session / RAM / disk
  // commons below are already cut back to what a checkpoint restore keeps (Reuse::Measure).
  bool checkpoints = false;
  bool unifiedKv = true;
  bool pinned = false;      // the target is the request's own pinned session sequence
  size_t minGain = 8;       // tokens a copy or a restore must add over the best so far

  size_t promptTokens = 0;
  size_t liveTokens = 0;  // tokens the target sequence holds
  size_t liveCommon = 0;  // of those, shared with the prompt

  bool hasSession = false;  // the request's session is spilled to the RAM tier
  size_t sessionTokens = 0, sessionCommon = 0;

  // Every sequence's KV (busy ones up to their computed position), by index; the target's
  // own entry is skipped for sharing.
  std::vector<size_t> sequenceCommon;
  int32_t target = -1;

  bool hasRam = false;
  size_t ramCommon = 0;

  bool hasDisk = false;      // a disk entry matches and no read was made yet
  size_t diskCommon = 0;
  bool diskReady = false;    // the disk entry read for this request is back
  size_t diskReadyCommon = 0;
};

struct ReusePlan {
  ReuseSource source = ReuseSource::None;
  size_t common = 0;         // prompt tokens the plan provides
  int32_t shareFrom = -1;    // Shared: the sequence to copy from
  bool readDisk = false;     // start a disk read and wait for it (nothing else is done yet)
  size_t liveCommon = 0;     // what the target's own KV gives (the fallback)
};

// The best plan among live / session / shared / RAM / disk.
ReusePlan PlanReuse(const ReuseInputs &in);

// "cold" | "exact" | "partial" | "sticky" | "restored" for a plan whose KV keeps `kept`
// prompt tokens after trimming.
const char *ReuseOutcome(const ReusePlan &plan, const ReuseInputs &in, size_t kept);

template <typename A, typename B>
size_t CommonPrefix(const A &a, const B &b) {
  size_t n = a.size() < b.size() ? a.size() : b.size();
  size_t c = 0;
  while (c < n && a[c] == b[c]) c++;
  return c;
}

}  // namespace llamux
