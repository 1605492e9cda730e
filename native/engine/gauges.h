// Gauges: the counters JS may read at any time (CacheCounters), and their refresh from the
// parts that hold the figures (sequences, tiers, sessions, the KV). Plain C++; the counters
// are atomics, written on the engine thread only.
#pragma once
#include <llama.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace llamux {

class Sequence;
class Sessions;
class StateTiers;

struct CacheCounters {
  std::atomic<uint64_t> ramBytes{0}, ramEntries{0}, ramBudget{0}, ramEvictions{0};
  std::atomic<uint64_t> sessions{0}, pinned{0}, spills{0}, restores{0}, shares{0};
  std::atomic<uint64_t> diskBytes{0}, diskEntries{0}, diskBudget{0}, diskRestores{0}, diskRejected{0};
  std::atomic<int64_t> kvCellsUsed{0}, kvCellsTotal{0};
  std::atomic<uint64_t> preemptions{0};  // requests that gave up their KV to a full cache
  std::atomic<uint64_t> idleSpills{0};   // idle sequences moved to RAM so they stop taxing attention
  std::atomic<uint64_t> checkpoints{0}, checkpointBytes{0};  // held by the sequences (recurrent/hybrid)
  std::atomic<uint64_t> checkpointRestores{0};
  // speculative decoding: verifications run, draft tokens verified, draft tokens accepted
  std::atomic<uint64_t> specVerifications{0}, specDrafted{0}, specAccepted{0};
};

class Gauges {
 public:
  struct Sources {
    llama_context *ctx = nullptr;
    uint32_t sequences = 0;
    bool unifiedKv = false;
    const std::vector<Sequence> *seqs = nullptr;
    const StateTiers *tiers = nullptr;
    const Sessions *sessions = nullptr;
  };
  explicit Gauges(CacheCounters *counters) : c_(counters) {}
  void SetSources(const Sources &s) { s_ = s; }

  // Every gauge (after a change of the tiers, sessions or checkpoints).
  void Update();
  // The KV cells in use only (once per tick).
  void UpdateKvCells();

 private:
  CacheCounters *c_;
  Sources s_;
};

}  // namespace llamux
