// Counts the KV cells in use. llama.cpp has no public call for it, so this one file reads its
// internal KV-cache class (we build llama.cpp from source, so the header matches the library).
#pragma once
#include <llama.h>

#include <cstdint>

namespace llamux {

// Cells holding at least one sequence's token (a cell shared by several sequences counts
// once), or -1 when the context's memory is not a plain KV cache (recurrent, hybrid, SWA).
int64_t KvCellsUsed(llama_context *ctx, uint32_t nSeqMax, bool unified);

}  // namespace llamux
