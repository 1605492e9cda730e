// Saved sequence states: the RAM tier (RamTier, ram_tier.h) and the disk tier
// (DiskTier, disk_tier.h) behind one interface, so the scheduler never copies KV bytes
// itself. Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <memory>
#include <string>
#include <vector>

#include "kv/disk_tier.h"
#include "kv/ram_tier.h"
#include "kv/sequence.h"

namespace llamux {

class StateTiers {
 public:
  StateTiers(std::unique_ptr<RamTier> ram, std::unique_ptr<DiskTier> disk)
      : ram_(std::move(ram)), disk_(std::move(disk)) {}

  RamTier *Ram() { return ram_.get(); }
  const RamTier *Ram() const { return ram_.get(); }
  DiskTier *Disk() { return disk_.get(); }
  const DiskTier *Disk() const { return disk_.get(); }
  bool Any() const { return ram_ || disk_; }

  // Saves a sequence's KV: to the RAM tier, and for prefixes also to the disk tier (written
  // by its I/O thread). A session (non-empty `session`) goes to the RAM tier only. False when
  // the RAM tier did not take it. Whether a KV about to be overwritten is worth saving is
  // Sequence::SaveIfWorth's rule.
  bool Save(const Sequence &s, const std::string &session);
  // Replaces a sequence's KV with a saved state (Sequence::Restore), timed. On failure the
  // sequence is left empty.
  bool Restore(Sequence &s, const std::vector<llama_token> &tokens, const std::vector<uint8_t> &blob, double *ms);
  // Write-through: queues the sequence's state for the disk tier (skipped when these exact
  // tokens are on disk already or the sequence is shorter than a block).
  void SaveToDisk(const Sequence &s);
  // A prompt-cache breakpoint (prefix_retention.h): saves the sequence's whole KV (the prefix)
  // to both tiers, retained there until `until`. Returns where it went (kRam | kDisk; kDisk:
  // queued for the I/O thread); 0 when no tier took it (none, budgets, scoped KV).
  static constexpr int kRam = 1, kDisk = 2;
  int SaveRetained(const Sequence &s, Clock::time_point until);
  // Extends the retention of a saved state holding exactly `tokens` in either tier.
  int Retain(const std::vector<llama_token> &tokens, Clock::time_point until);
  // Writes every sequence holding at least `minTokens` to the disk tier (at close).
  void SaveAllToDisk(const std::vector<Sequence> &sequences, size_t minTokens);

  uint64_t restores = 0;

 private:
  std::unique_ptr<RamTier> ram_;
  std::unique_ptr<DiskTier> disk_;
};

}  // namespace llamux
