#include "kv/kv_cells.h"

#include "llama-kv-cache.h"

namespace llamux {

int64_t KvCellsUsed(llama_context *ctx, uint32_t nSeqMax, bool unified) {
  auto *kv = dynamic_cast<llama_kv_cache *>(llama_get_memory(ctx));
  if (kv == nullptr) return -1;
  if (unified || kv->get_n_stream() <= 1) return kv->get_cells(0).get_used();
  int64_t total = 0;
  for (uint32_t s = 0; s < nSeqMax; s++) total += kv->get_cells(static_cast<llama_seq_id>(s)).get_used();
  return total;
}

}  // namespace llamux
