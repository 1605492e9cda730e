#include "engine/gauges.h"

#include "kv/kv_cells.h"
#include "kv/sequence.h"
#include "kv/sessions.h"
#include "kv/state_tiers.h"

namespace llamux {

void Gauges::UpdateKvCells() {
  if (s_.ctx != nullptr) c_->kvCellsUsed = KvCellsUsed(s_.ctx, s_.sequences, s_.unifiedKv);
}

void Gauges::Update() {
  UpdateKvCells();
  const RamTier *ram = s_.tiers ? s_.tiers->Ram() : nullptr;
  const DiskTier *disk = s_.tiers ? s_.tiers->Disk() : nullptr;
  c_->ramBytes = ram ? ram->Bytes() : 0;
  c_->ramEntries = ram ? ram->Count() : 0;
  c_->ramEvictions = ram ? ram->Evictions() : 0;
  c_->sessions = s_.sessions ? s_.sessions->Size() : 0;
  if (disk) {
    c_->diskBytes = disk->Bytes();
    c_->diskEntries = disk->Count();
    c_->diskRejected = disk->Rejected();
  }
  c_->pinned = s_.sessions ? s_.sessions->PinnedCount() : 0;
  c_->restores = s_.tiers ? s_.tiers->restores : 0;
  uint64_t n = 0, bytes = 0;
  if (s_.seqs) {
    for (const auto &s : *s_.seqs) {
      n += s.Checkpoints().size();
      bytes += s.CheckpointBytes();
    }
  }
  c_->checkpoints = n;
  c_->checkpointBytes = bytes;
}

}  // namespace llamux
