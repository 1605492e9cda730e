// Small changes llamux makes to the pinned llama.cpp source when it exports deps/llama.cpp
// (a packed llamux carries the patched tree). Each names what it fixes and how it was measured;
// each must match the source exactly once, or the export stops: a new llama.cpp release is
// re-measured, not patched blind.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const FA_OPS = 'ggml/src/ggml-cpu/ops.cpp';
const here = dirname(fileURLToPath(import.meta.url));
/** Longer replacement code lives next to this script as C++ (scripts/llama-patches/). */
const patchSource = (name) => readFileSync(join(here, 'llama-patches', name), 'utf8');

export const LLAMA_CPP_PATCHES = [
  {
    id: 'fa-tiled-min-q',
    // CPU flash attention runs batches under 64 query rows one row at a time over the whole
    // KV, and 64 rows and up as tiles (K/V converted once per tile). Over a 3,830-token KV a
    // 63-token batch took 3.4x as long as a 64-token one on a Sapphire Rapids CPU and ~2x on
    // a Zen 4 (issue 13, bench attention suite). The tiled path handles partial tiles, so it
    // starts at LLAMUX_FA_TILED_MIN_Q rows (a compile definition) when the rows see most of
    // the KV (one sequence's prompt). 6: with fa-tiled-kt a partial tile costs what its rows
    // need, and over a 3,830-token KV (raw loop, Zen 4, 2 threads) 8 new tokens took 85 ms
    // tiled vs 128 ms by rows, 12 took 112 vs 163, while 2-4 stay faster by rows (42-59 ms vs
    // 68-85). Rows of different sequences (a decode step of many
    // sequences in a unified KV) each see a small part of it: the row path skips masked cells
    // and the tiled one cannot, so those keep the row path (without this check 16 concurrent
    // conversations decoded at 65 tok/s instead of 205: bench throughput suite, Zen 4).
    file: FA_OPS,
    edits: [
      {
        find: 'static void ggml_compute_forward_flash_attn_ext_tiled(\n',
        replace: `#ifndef LLAMUX_FA_TILED_MIN_Q
#define LLAMUX_FA_TILED_MIN_Q 6
#endif

// llamux: whether the first, middle and last query rows each see at least half of the KV.
static bool llamux_fa_rows_see_most_of_kv(const ggml_tensor * mask, int64_t n_kv, int64_t n_rows) {
    if (mask == nullptr) return true;
    if (mask->type != GGML_TYPE_F16) return false;
    const int64_t rows[3] = { 0, n_rows / 2, n_rows - 1 };
    for (int64_t r : rows) {
        const ggml_fp16_t * mp = (const ggml_fp16_t *) ((const char *) mask->data + r*mask->nb[1]);
        int64_t visible = 0;
        for (int64_t i = 0; i < n_kv; i++) {
            visible += GGML_CPU_FP16_TO_FP32(mp[i]) != -INFINITY;
        }
        if (2*visible < n_kv) return false;
    }
    return true;
}

static void ggml_compute_forward_flash_attn_ext_tiled(
`,
      },
      {
        find: '                                neq1 >= Q_TILE_SZ);\n',
        replace: '                                (neq1 >= Q_TILE_SZ || (neq1 >= LLAMUX_FA_TILED_MIN_Q && llamux_fa_rows_see_most_of_kv(dst->src[3], nek1, neq1))));\n',
      },
    ],
  },
  {
    id: 'fa-tiled-kt',
    // ggml's tiled kernel spent ~60 % of its time converting K tiles (transposed, one scalar
    // per element, for every Q tile and head) and mask tiles (one element at a time): a
    // 248-token prompt over a 3,830-token KV is 35 % flash attention (perf, Zen 4). The
    // replacement (fa-tiled-kt.cpp) computes the scores transposed so K rows convert as vectors
    // and Q is transposed once per tile, and reads a mask tile element by element only when
    // it is mixed. Checked against ggml's reference kernel by test/native/flash-attention.test.ts.
    file: FA_OPS,
    edits: [
      {
        find: '// Reduction function: combines partial results across KV chunks\n',
        replace: `${patchSource('fa-tiled-kt.cpp')}// Reduction function: combines partial results across KV chunks\n`,
      },
      {
        find: '                ggml_compute_forward_flash_attn_ext_tiled(params, dst, ir0, ir1);\n',
        replace: `#ifdef LLAMUX_FA_TILED_KT
                llamux_flash_attn_ext_tiled_kt(params, dst, ir0, ir1);
#else
                ggml_compute_forward_flash_attn_ext_tiled(params, dst, ir0, ir1);
#endif
`,
      },
    ],
  },
];

/** What deps/llama.cpp records: each patch's id and a digest of its edits, so a checkout
 * re-exports when a patch changes. */
export const llamaCppPatchIds = LLAMA_CPP_PATCHES.map((p) => `${p.id}@${createHash('sha256').update(JSON.stringify(p.edits)).digest('hex').slice(0, 12)}`);

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
