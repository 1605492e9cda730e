// Small changes llamux makes to the pinned llama.cpp source when it exports deps/llama.cpp
// (a packed llamux carries the patched tree). Each names what it fixes and how it was measured;
// each must match the source exactly once, or the export stops: a new llama.cpp release is
// re-measured, not patched blind.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const FA_OPS = 'ggml/src/ggml-cpu/ops.cpp';

export const LLAMA_CPP_PATCHES = [
  {
    id: 'fa-tiled-min-q',
    // CPU flash attention runs batches under 64 query rows one row at a time over the whole
    // KV, and 64 rows and up as tiles (K/V converted once per tile). Over a 3,830-token KV a
    // 63-token batch took 3.9x as long as a 64-token one on a Sapphire Rapids CPU and 1.9x on
    // a Zen 4 (issue 13, bench attention suite). The tiled path handles partial tiles, so it
    // starts at LLAMUX_FA_TILED_MIN_Q rows instead (a compile definition; measured default).
    file: FA_OPS,
    edits: [
      {
        find: 'static void ggml_compute_forward_flash_attn_ext_tiled(\n',
        replace: '#ifndef LLAMUX_FA_TILED_MIN_Q\n#define LLAMUX_FA_TILED_MIN_Q 16\n#endif\n\nstatic void ggml_compute_forward_flash_attn_ext_tiled(\n',
      },
      {
        find: '                                neq1 >= Q_TILE_SZ);\n',
        replace: '                                neq1 >= LLAMUX_FA_TILED_MIN_Q);\n',
      },
    ],
  },
];

export const llamaCppPatchIds = LLAMA_CPP_PATCHES.map((p) => p.id);

/** Applies every patch to the llama.cpp tree at `dir`; throws when a patch does not match. */
export function applyLlamaCppPatches(dir) {
  for (const patch of LLAMA_CPP_PATCHES) {
    const path = join(dir, patch.file);
    let text = readFileSync(path, 'utf8');
    for (const { find, replace } of patch.edits) {
      const at = text.indexOf(find);
      if (at < 0 || text.indexOf(find, at + 1) >= 0) {
        throw new Error(`llama.cpp patch ${patch.id} does not apply to ${patch.file}: expected exactly one ${JSON.stringify(find.trim())}`);
      }
      text = text.slice(0, at) + replace + text.slice(at + find.length);
    }
    writeFileSync(path, text);
  }
}
