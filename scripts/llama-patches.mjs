// Small changes llamux makes to the pinned llama.cpp source when it exports deps/llama.cpp
// (a packed llamux carries the patched tree). Each names what it fixes and how it was measured;
// each must match the source exactly once, or the export stops: a new llama.cpp release is
// re-measured, not patched blind.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const FA_OPS = 'ggml/src/ggml-cpu/ops.cpp';
const CPU_C = 'ggml/src/ggml-cpu/ggml-cpu.c';
const CPU_CPP = 'ggml/src/ggml-cpu/ggml-cpu.cpp';
const REPACK = 'ggml/src/ggml-cpu/repack.cpp';
const QUANTS_X86 = 'ggml/src/ggml-cpu/arch/x86/quants.c';
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
    id: 'fa-masked-kv',
    // Idle KV must not tax the sequences that decode. With a unified KV a session or cached
    // prefix sitting idle widens every other sequence's attention window by its cells, all
    // masked. A one-token step over 512+ cells splits the KV evenly between threads, so the
    // threads given the idle cells finish at once and wait while one does all the visible
    // work: a 2,000-token idle session cost a decoding request 6-9 % on a Zen 4 (2 threads;
    // ggml_barrier 7.8 -> 15.0 % of samples, perf) and 33 % on a Sapphire Rapids CPU (4
    // threads; bench attention suite, idle-KV table). The split now gives each thread an
    // equal share of the visible cells, and the row kernel steps over whole runs of 32 masked
    // cells with one comparison instead of converting each. Results are unchanged: the same
    // cells are skipped, and the chunks still cover the KV once.
    file: FA_OPS,
    edits: [
      {
        find: 'static void ggml_compute_forward_flash_attn_ext_f16_one_chunk(\n',
        replace: `// llamux: whether the 32 mask cells at mp are all -inf (F16 0xFC00).
static inline bool llamux_fa_masked32(const ggml_fp16_t * mp) {
    uint64_t w[8];
    memcpy(w, mp, sizeof(w));
    uint64_t differ = 0;
    for (int i = 0; i < 8; i++) {
        differ |= w[i] ^ 0xFC00FC00FC00FC00ULL;
    }
    return differ == 0;
}

// llamux: the KV range [*start, *end) of chunk number chunk of n_chunks, each chunk holding an
// equal share of the cells the mask row mp leaves visible. Left as it is when fewer cells than
// chunks are visible, so only chunk 0 ever starts at cell 0 (attention sinks are added there).
static void llamux_fa_visible_chunk(const ggml_fp16_t * mp, int64_t n_kv, int64_t chunk, int64_t n_chunks, int64_t * start, int64_t * end) {
    const uint16_t * bits = (const uint16_t *) mp;
    int64_t visible = 0;
    for (int64_t i = 0; i < n_kv; i++) {
        if ((i & 31) == 0 && i + 32 <= n_kv && llamux_fa_masked32(mp + i)) {
            i += 31;
            continue;
        }
        visible += bits[i] != 0xFC00;
    }
    if (visible < n_chunks || chunk >= n_chunks) {
        return;
    }
    // chunk c starts at the first cell after c*visible/n_chunks visible ones
    const int64_t from = chunk*visible/n_chunks;
    const int64_t to   = (chunk + 1)*visible/n_chunks;
    int64_t seen = 0;
    int64_t s = chunk == 0 ? 0 : -1;
    int64_t e = chunk + 1 == n_chunks ? n_kv : -1;
    for (int64_t i = 0; i < n_kv && (s < 0 || e < 0); i++) {
        if ((i & 31) == 0 && i + 32 <= n_kv && llamux_fa_masked32(mp + i)) {
            i += 31;
            continue;
        }
        if (bits[i] == 0xFC00) {
            continue;
        }
        if (s < 0 && seen == from) s = i;
        if (e < 0 && seen == to) e = i;
        seen++;
    }
    *start = s < 0 ? n_kv : s;
    *end   = e < 0 ? n_kv : e;
}

static void ggml_compute_forward_flash_attn_ext_f16_one_chunk(
`,
      },
      {
        find: `        for (int64_t ic = ic_start; ic < ic_end; ++ic) {
            const float mv = mp ? slope*GGML_CPU_FP16_TO_FP32(mp[ic]) : 0.0f;
`,
        replace: `        for (int64_t ic = ic_start; ic < ic_end; ++ic) {
            if (mp && (ic & 31) == 0 && ic + 32 <= ic_end && llamux_fa_masked32(mp + ic)) {
                ic += 31;
                continue;
            }
            const float mv = mp ? slope*GGML_CPU_FP16_TO_FP32(mp[ic]) : 0.0f;
`,
      },
      {
        find: `        const int64_t ic_start = ith * chunk_size;
        const int64_t ic_end   = std::min(ic_start + chunk_size, nek1);
`,
        replace: `        int64_t ic_start = ith * chunk_size;
        int64_t ic_end   = std::min(ic_start + chunk_size, nek1);
        if (dst->src[3] && ic_start < nek1) {
            // the chunks the reduction reads (an even split's non-empty ones), balanced by visible cells
            llamux_fa_visible_chunk((const ggml_fp16_t *) dst->src[3]->data, nek1, ith, (nek1 + chunk_size - 1)/chunk_size, &ic_start, &ic_end);
        }
`,
      },
    ],
  },
  {
    id: 'fa-visible-list',
    // A decode step of many sequences in a unified KV runs the row kernel once per query row and
    // head, and each run read the mask of every cell: the cells the sequences generated lie
    // interleaved (one per sequence per step), so no run of 32 is wholly masked and each cell's
    // mask was converted and compared again for every head. At 16 conversations on an AVX2 CPU
    // (250M Q8_0, 2 threads) attention took 36 % of a decode step against 27 % with a KV per
    // sequence, and llamux decoded 0.91x llama-server's tokens/s (bench throughput suite, perf).
    // Each call of the row kernel now lists a mask row's visible cells once (when at most a
    // quarter of the range is visible) and every head of that row walks the list, and the rows
    // are taken head-fastest (all heads of one query row, then the next row), so the heads that
    // share a KV head find its cells in L1 as they do with a KV per sequence, where each
    // sequence's single row is its own stream. Each (row, head) computes the same cells in the
    // same order into its own output, so results are unchanged.
    file: FA_OPS,
    edits: [
      {
        find: `        const int iq3 = ir/(neq2*neq1);
        const int iq2 = (ir - iq3*neq2*neq1)/neq1;
        const int iq1 = (ir - iq3*neq2*neq1 - iq2*neq1);

        const uint32_t h = iq2; // head index
        const float slope = (max_bias > 0.0f) ? h < n_head_log2 ? powf(m0, h + 1) : powf(m1, 2*(h - n_head_log2) + 1) : 1.0f;

        float S = 0.0f;      // sum`,
        replace: `        const int iq3 = ir/(neq2*neq1);
        const int iq1 = (ir - iq3*neq2*neq1)/neq2;
        const int iq2 = (ir - iq3*neq2*neq1 - iq1*neq2);

        const uint32_t h = iq2; // head index
        const float slope = (max_bias > 0.0f) ? h < n_head_log2 ? powf(m0, h + 1) : powf(m1, 2*(h - n_head_log2) + 1) : 1.0f;

        float S = 0.0f;      // sum`,
      },
      {
        find: 'static void ggml_compute_forward_flash_attn_ext_f16_one_chunk(\n',
        replace: `// llamux: the visible cells of a mask row over [ic_start, ic_end), listed once per row and
// used by every head (fa-visible-list); null when the row is not sparse or not listed.
struct llamux_fa_vis {
    const ggml_fp16_t * mp;
    bool sparse;
    std::vector<int32_t> idx;
};

static const std::vector<int32_t> * llamux_fa_visible_list(std::vector<llamux_fa_vis> & cache, const ggml_fp16_t * mp, int64_t ic_start, int64_t ic_end) {
    if (mp == nullptr || ic_end - ic_start < 256) {
        return nullptr;
    }
    for (auto & e : cache) {
        if (e.mp == mp) {
            return e.sparse ? &e.idx : nullptr;
        }
    }
    if (cache.size() >= 64) {
        return nullptr;
    }
    cache.push_back({ mp, false, {} });
    auto & e = cache.back();
    const uint16_t * bits = (const uint16_t *) mp;
    for (int64_t i = ic_start; i < ic_end; i++) {
        if ((i & 31) == 0 && i + 32 <= ic_end && llamux_fa_masked32(mp + i)) {
            i += 31;
            continue;
        }
        if (bits[i] != 0xFC00) {
            e.idx.push_back((int32_t) i);
        }
    }
    e.sparse = 4*(int64_t) e.idx.size() <= ic_end - ic_start;
    if (!e.sparse) {
        std::vector<int32_t>().swap(e.idx);
    }
    return e.sparse ? &e.idx : nullptr;
}

static void ggml_compute_forward_flash_attn_ext_f16_one_chunk(
`,
      },
      {
        find: '    int ith = params->ith;\n\n    for (int ir = ir0; ir < ir1; ++ir) {\n',
        replace: '    int ith = params->ith;\n\n    std::vector<llamux_fa_vis> llamux_vis_cache;\n    llamux_vis_cache.reserve(64);\n\n    for (int ir = ir0; ir < ir1; ++ir) {\n',
      },
      {
        find: `        for (int64_t ic = ic_start; ic < ic_end; ++ic) {
            if (mp && (ic & 31) == 0 && ic + 32 <= ic_end && llamux_fa_masked32(mp + ic)) {
                ic += 31;
                continue;
            }
`,
        replace: `        const std::vector<int32_t> * llamux_vis = llamux_fa_visible_list(llamux_vis_cache, mp, ic_start, ic_end);
        const int64_t llamux_end = llamux_vis ? (int64_t) llamux_vis->size() : ic_end;
        for (int64_t it = llamux_vis ? 0 : ic_start; it < llamux_end; ++it) {
            const int64_t ic = llamux_vis ? (int64_t) (*llamux_vis)[it] : it;
            if (!llamux_vis && mp && (ic & 31) == 0 && ic + 32 <= ic_end && llamux_fa_masked32(mp + ic)) {
                it += 31;
                continue;
            }
`,
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
  {
    id: 'grammar-stack-cap',
    // An ambiguous grammar (alternatives that match the same text, nested) multiplies its parse
    // stacks with every character: a tool schema of anyOf array branches 16 deep gave no answer
    // in 90 s, and one token of 8 brackets took ~0.4 s to accept on the engine thread (stacks
    // deduplicated pairwise), stalling every sequence of the context (issue 30). The cap is
    // checked per character, inside the token being accepted, so no token can multiply the
    // stacks past it: the accept throws, and llamux fails that request alone (GRAMMAR_FAILED).
    // 1024: above what llamux's schema grammars reach (ambiguity is refused at 16 parses; a
    // deterministic grammar holds one stack per alternative that may come next).
    file: 'src/llama-grammar.cpp',
    edits: [
      {
        find: `                for (const auto & cur_stack : current_stacks) {
                    llama_grammar_accept_chr(grammar, cur_stack, *it, next_stacks);
                }
`,
        replace: `#ifndef LLAMUX_GRAMMAR_MAX_STACKS
#define LLAMUX_GRAMMAR_MAX_STACKS 1024
#endif
                for (const auto & cur_stack : current_stacks) {
                    llama_grammar_accept_chr(grammar, cur_stack, *it, next_stacks);
                    if (next_stacks.size() > LLAMUX_GRAMMAR_MAX_STACKS) {
                        throw std::runtime_error("llamux: grammar stack limit exceeded");
                    }
                }
`,
      },
      {
        find: `                    stacks_new.emplace_back(surviving_stack);
`,
        replace: `                    stacks_new.emplace_back(surviving_stack);
                    if (stacks_new.size() > LLAMUX_GRAMMAR_MAX_STACKS) {
                        throw std::runtime_error("llamux: grammar stack limit exceeded");
                    }
`,
      },
    ],
  },
  {
    id: 'grammar-piece-cache',
    // llama_grammar_apply_impl decodes every vocabulary piece into a fresh vector of code points
    // on every token (32,000 allocations per token for Llama 2): a grammar request cost the engine
    // thread ~4-6 ms per token on the tiny Llama 2 model, whose decode step takes 0.4 ms, and every
    // sequence of the context waits for it (issue 30). The code points of each piece depend only
    // on the piece when no partial UTF-8 sequence is pending, so they are decoded once per grammar
    // (shared by its clones) into one flat array; a pending partial sequence takes the old path.
    file: 'src/llama-grammar.h',
    edits: [
      {
        find: `                                                       // string, and the grammar will be given the string from the first match group onwards.

};
`,
        replace: `                                                       // string, and the grammar will be given the string from the first match group onwards.

    // llamux: every piece's code points (0-terminated, from offsets[id]) and its trailing partial
    // UTF-8 state, decoded on the first apply; shared by clones (read-only once built).
    struct llamux_piece_cache {
        std::vector<uint32_t> code_points;
        std::vector<size_t> offsets;
        std::vector<llama_partial_utf8> partial;
        std::vector<uint8_t> skip;  // empty piece or one starting with NUL
    };
    mutable std::shared_ptr<const llamux_piece_cache> llamux_pieces;
};
`,
      },
      {
        find: '#include <map>\n',
        replace: '#include <map>\n#include <memory>\n',
      },
    ],
  },
  {
    id: 'grammar-piece-cache-impl',
    // The other half of grammar-piece-cache (same measurement).
    file: 'src/llama-grammar.cpp',
    edits: [
      {
        find: `    std::vector<std::pair<std::vector<uint32_t>, llama_partial_utf8>> candidates_decoded;
    candidates_decoded.reserve(cur_p->size);

    llama_grammar_candidates candidates_grammar;
    candidates_grammar.reserve(cur_p->size);
`,
        replace: `    std::vector<std::pair<std::vector<uint32_t>, llama_partial_utf8>> candidates_decoded;

    llama_grammar_candidates candidates_grammar;
    candidates_grammar.reserve(cur_p->size);

    if (grammar.partial_utf8.n_remain == 0) {
        if (!grammar.llamux_pieces) {
            auto cache = std::make_shared<llama_grammar::llamux_piece_cache>();
            const uint32_t n = grammar.vocab->n_tokens();
            cache->offsets.reserve(n);
            cache->partial.reserve(n);
            cache->skip.reserve(n);
            for (uint32_t id = 0; id < n; ++id) {
                const std::string & piece = grammar.vocab->token_to_piece(id);
                cache->offsets.push_back(cache->code_points.size());
                if (piece.empty() || piece[0] == 0) {
                    cache->skip.push_back(1);
                    cache->partial.push_back({ 0, 0 });
                    cache->code_points.push_back(0);
                    continue;
                }
                auto decoded = decode_utf8(piece, { 0, 0 });
                cache->skip.push_back(0);
                cache->partial.push_back(decoded.second);
                cache->code_points.insert(cache->code_points.end(), decoded.first.begin(), decoded.first.end());
            }
            grammar.llamux_pieces = std::move(cache);
        }
        const auto & cache = *grammar.llamux_pieces;
        for (size_t i = 0; i < cur_p->size; ++i) {
            const llama_token id = cur_p->data[i].id;
            if (grammar.vocab->is_eog(id)) {
                if (!allow_eog) {
                    cur_p->data[i].logit = -INFINITY;
                }
            } else if (id < 0 || (size_t) id >= cache.skip.size() || cache.skip[id]) {
                cur_p->data[i].logit = -INFINITY;
            } else {
                candidates_grammar.push_back({ i, cache.code_points.data() + cache.offsets[id], cache.partial[id], id });
            }
        }
        const auto rejects = llama_grammar_reject_candidates(grammar.rules, grammar.stacks, candidates_grammar);
        for (const auto & reject : rejects) {
            cur_p->data[reject.index].logit = -INFINITY;
        }
        return;
    }
    candidates_decoded.reserve(cur_p->size);
`,
      },
      {
        find: `    // redirect elements in stacks to point to new rules
`,
        replace: `    result->llamux_pieces = grammar.llamux_pieces;

    // redirect elements in stacks to point to new rules
`,
      },
    ],
  },
  {
    id: 'grammar-mask-cache',
    // A grammar that allows few tokens (digits, a closing quote) on a model that strays from it
    // still checked every vocabulary token each time the pick was refused: 1.4-3.7 ms per token
    // on a 32k vocabulary, on the one engine thread (issue 30). Which tokens a set of parse stacks
    // refuses never changes, so each grammar object remembers it per stack set (16 sets, a byte
    // per token each) and checks only tokens it has not seen under that set.
    file: 'src/llama-grammar.h',
    edits: [
      {
        find: `    mutable std::shared_ptr<const llamux_piece_cache> llamux_pieces;
};
`,
        replace: `    mutable std::shared_ptr<const llamux_piece_cache> llamux_pieces;

    // llamux: tokens refused (2) or allowed (1) under a parse-stack set, 0 not checked yet; this
    // object only (a clone's stacks point into its own rules, so its keys would never match).
    struct llamux_mask_entry {
        llama_grammar_stacks stacks;
        std::vector<uint8_t> state;
    };
    mutable std::vector<llamux_mask_entry> llamux_masks;
};
`,
      },
    ],
  },
  {
    id: 'grammar-mask-cache-impl',
    // The other half of grammar-mask-cache (same measurement).
    file: 'src/llama-grammar.cpp',
    edits: [
      {
        find: `        const auto & cache = *grammar.llamux_pieces;
        for (size_t i = 0; i < cur_p->size; ++i) {
            const llama_token id = cur_p->data[i].id;
            if (grammar.vocab->is_eog(id)) {
                if (!allow_eog) {
                    cur_p->data[i].logit = -INFINITY;
                }
            } else if (id < 0 || (size_t) id >= cache.skip.size() || cache.skip[id]) {
                cur_p->data[i].logit = -INFINITY;
            } else {
                candidates_grammar.push_back({ i, cache.code_points.data() + cache.offsets[id], cache.partial[id], id });
            }
        }
        const auto rejects = llama_grammar_reject_candidates(grammar.rules, grammar.stacks, candidates_grammar);
        for (const auto & reject : rejects) {
            cur_p->data[reject.index].logit = -INFINITY;
        }
        return;
`,
        replace: `        const auto & cache = *grammar.llamux_pieces;
        // Which tokens these parse stacks refuse depends only on the stacks (no partial UTF-8
        // is pending): remembered per stack set, checked only for tokens not seen in it yet.
        llama_grammar::llamux_mask_entry * mask = nullptr;
        for (auto & e : grammar.llamux_masks) {
            if (e.stacks == grammar.stacks) {
                mask = &e;
                break;
            }
        }
        if (mask == nullptr) {
            if (grammar.llamux_masks.size() >= 16) {
                grammar.llamux_masks.erase(grammar.llamux_masks.begin());
            }
            grammar.llamux_masks.push_back({ grammar.stacks, std::vector<uint8_t>(cache.skip.size(), 0) });
            mask = &grammar.llamux_masks.back();
        }
        for (size_t i = 0; i < cur_p->size; ++i) {
            const llama_token id = cur_p->data[i].id;
            if (grammar.vocab->is_eog(id)) {
                if (!allow_eog) {
                    cur_p->data[i].logit = -INFINITY;
                }
            } else if (id < 0 || (size_t) id >= cache.skip.size() || cache.skip[id] || mask->state[id] == 2) {
                cur_p->data[i].logit = -INFINITY;
            } else if (mask->state[id] == 0) {
                candidates_grammar.push_back({ i, cache.code_points.data() + cache.offsets[id], cache.partial[id], id });
            }
        }
        if (!candidates_grammar.empty()) {
            const auto rejects = llama_grammar_reject_candidates(grammar.rules, grammar.stacks, candidates_grammar);
            for (const auto & c : candidates_grammar) {
                mask->state[c.id] = 1;
            }
            for (const auto & reject : rejects) {
                cur_p->data[reject.index].logit = -INFINITY;
                mask->state[reject.id] = 2;
            }
        }
        return;
`,
      },
    ],
  },
  {
    id: 'grammar-mask-cache-clone',
    // The mask a grammar remembered for its current parse stacks travels with its clones (the
    // stacks redirected to the clone's rules, as the clone's own stacks are). llamux warms each tool-call grammar
    // once over the whole vocabulary (native/sampling/grammar_cache.cc) and gives every request
    // a clone, so a required call's first token no longer checks every token: on a 151k
    // vocabulary (Qwen3) the first sampled token of a forced tool call took ~12 ms of a ~23 ms
    // time to first token (bench multimodal suite, sampleMs of the engine's timings).
    file: 'src/llama-grammar.cpp',
    edits: [
      {
        find: '    result->llamux_pieces = grammar.llamux_pieces;\n',
        replace: `    result->llamux_pieces = grammar.llamux_pieces;
    if (!grammar.llamux_masks.empty()) {
        std::map<const llama_grammar_element *, const llama_grammar_element *> moved;
        for (size_t ir0 = 0; ir0 < grammar.rules.size(); ir0++) {
            for (size_t ir1 = 0; ir1 < grammar.rules[ir0].size(); ir1++) {
                moved[&grammar.rules[ir0][ir1]] = &result->rules[ir0][ir1];
            }
        }
        for (const auto & e : grammar.llamux_masks) {
            // the mask of the state the clone starts in: a span's grammar cloned from the warmed
            // start state finds it; a draft check's clone, which only accepts, copies one mask
            if (e.stacks != grammar.stacks) {
                continue;
            }
            llama_grammar::llamux_mask_entry copy { e.stacks, e.state };
            bool ok = true;
            for (auto & stack : copy.stacks) {
                for (auto & el : stack) {
                    const auto it = moved.find(el);
                    if (it == moved.end()) {
                        ok = false;
                        break;
                    }
                    el = it->second;
                }
                if (!ok) {
                    break;
                }
            }
            if (ok) {
                result->llamux_masks.push_back(std::move(copy));
            }
            break;
        }
    }
`,
      },
    ],
  },
  {
    id: 'det-threadpool',
    // Deterministic mode (issue 26): a thread pool marked deterministic (a context created with
    // deterministic: true marks its own pools, through the CPU backend's proc address
    // llamux_threadpool_set_deterministic) computes its graphs with ggml's use_ref flag set.
    // use_ref already keeps flash attention on the row kernel (no tiles, no KV split across
    // threads: each query row runs over its visible cells in cell order, one thread per row)
    // and skips the IQ panel GEMM; det-mul-mat and det-repack extend it to the matrix multiply.
    // Other contexts' pools (and every default-mode context) are unchanged.
    file: CPU_C,
    edits: [
      {
        find: '    enum ggml_status ec;\n};\n',
        replace: `    enum ggml_status ec;
    bool llamux_deterministic; // llamux: compute with use_ref (issue 26)
};

// llamux: marks a pool deterministic (reached through the CPU backend's proc address).
void llamux_threadpool_set_deterministic(struct ggml_threadpool * tp, bool on);
void llamux_threadpool_set_deterministic(struct ggml_threadpool * tp, bool on) {
    if (tp != NULL) tp->llamux_deterministic = on;
}
`,
      },
      {
        find: '        threadpool->prio             = tpp->prio;\n',
        replace: '        threadpool->prio             = tpp->prio;\n        threadpool->llamux_deterministic = false;\n',
      },
      {
        find: '        /*.use_ref    =*/ cplan->use_ref,\n',
        replace: '        /*.use_ref    =*/ cplan->use_ref || tp->llamux_deterministic,\n',
      },
    ],
  },
  {
    id: 'det-proc-address',
    // The CPU backend may be a library loaded at run time (one per CPU variant): the addon finds
    // llamux_threadpool_set_deterministic through the registry, like ggml_threadpool_new.
    file: CPU_CPP,
    edits: [
      {
        find: '    if (strcmp(name, "ggml_backend_cpu_set_use_ref") == 0) {\n',
        replace: `    if (strcmp(name, "llamux_threadpool_set_deterministic") == 0) {
        return (void *)llamux_threadpool_set_deterministic;
    }
    if (strcmp(name, "ggml_backend_cpu_set_use_ref") == 0) {
`,
      },
      {
        find: 'static void * ggml_backend_cpu_get_proc_address(ggml_backend_reg_t reg, const char * name) {\n',
        replace: `extern "C" void llamux_threadpool_set_deterministic(struct ggml_threadpool * tp, bool on);

static void * ggml_backend_cpu_get_proc_address(ggml_backend_reg_t reg, const char * name) {
`,
      },
    ],
  },
  {
    id: 'pool-pause-proc-address',
    // An idle context's pool workers poll for the next graph for a while before they sleep;
    // beside another context (the bench's plain and speculative contexts, an app's several
    // models) that spinning takes a core from the one computing. The addon pauses its pools when
    // its engine goes idle (ggml resumes a paused pool at its next graph); ggml_threadpool_pause
    // is reached through the registry like ggml_threadpool_new (the CPU backend may be a library
    // loaded at run time).
    file: CPU_CPP,
    edits: [
      {
        find: '    if (strcmp(name, "ggml_threadpool_free") == 0) {\n',
        replace: `    if (strcmp(name, "ggml_threadpool_pause") == 0) {
        return (void *)ggml_threadpool_pause;
    }
    if (strcmp(name, "ggml_threadpool_free") == 0) {
`,
      },
    ],
  },
  {
    id: 'det-mul-mat',
    // With use_ref (deterministic mode) a matrix multiply computes every output element with one
    // vec_dot of one weight row and one activation row, whatever the batch: llamafile's sgemm
    // (taken for most batches, its tiles accumulating in another order than vec_dot) and the
    // two-row mmla kernels are skipped. Which thread computes an element, and how the rows are
    // chunked, then no longer changes its value: activation rows are quantized block by block.
    file: CPU_C,
    edits: [
      {
        find: '    if (src1_cont) {\n',
        replace: '    if (src1_cont && !params->use_ref) {\n',
      },
      {
        find: `    if (src1->type != vec_dot_type) {
        const void* wdata = (src1->type == vec_dot_type) ? src1->data : params->wdata;
`,
        replace: `    if (src1->type != vec_dot_type && !params->use_ref) {
        const void* wdata = (src1->type == vec_dot_type) ? src1->data : params->wdata;
`,
      },
      {
        find: '        if ((nr0 % 2 != 0) || (ne11 % 2 != 0) ||',
        replace: '        if (params->use_ref || (nr0 % 2 != 0) || (ne11 % 2 != 0) ||',
      },
    ],
  },
  {
    id: 'det-repack',
    // Weights repacked at load (CPU_REPACK buffers) multiply four activation rows at a time by a
    // GEMM and the rest one by one by a GEMV, whose sums run in another order: with use_ref
    // (deterministic mode) every row takes the GEMV.
    file: REPACK,
    edits: [
      {
        find: '        if (nrows > 3) {\n',
        replace: '        if (nrows > 3 && !params->use_ref) {\n',
      },
      {
        find: '        for (int iter = nrows - (nrows % 4); iter < nrows; iter++) {\n',
        replace: '        for (int iter = (nrows > 3 && !params->use_ref) ? nrows - (nrows % 4) : 0; iter < nrows; iter++) {\n',
      },
    ],
  },
  {
    id: 'det-gemm-q8_0',
    // det-mul-mat makes deterministic mode compute each element with one vec_dot, which reloads
    // a weight block for every activation row: 8 sequences decoded at 0.6x and prompts prefilled
    // at 0.7-0.75x of default mode (issue 26). For Q8_0 weights (not repacked on x86) a 4 x 4
    // (AVX-512) or 4 x 2 (AVX2) register-tiled kernel repeats vec_dot's exact operations per
    // element (scripts/llama-patches/det-gemm-q8_0.c), so the logits stay bit-identical to the
    // vec_dot path whatever the batch (test/determinism) while each weight block serves 4 rows.
    // Plain 2-D products only (no broadcast); everything else keeps the vec_dot loop.
    file: QUANTS_X86,
    edits: [{ find: 'void ggml_vec_dot_tq1_0_q8_K(int n,', replace: `${patchSource('det-gemm-q8_0.c')}\nvoid ggml_vec_dot_tq1_0_q8_K(int n,` }],
  },
  {
    id: 'det-gemm-q8_0-call',
    // det-gemm-q8_0's caller: the matrix multiply's chunk loop hands each 16 x 16 tile to it.
    file: CPU_C,
    edits: [
      {
        find: 'static void ggml_compute_forward_mul_mat_one_chunk(\n',
        replace: `#if defined(__AVX2__)
// llamux det-gemm-q8_0 (arch/x86/quants.c): deterministic mode, Q8_0 weights, a plain 2-D product
void llamux_det_gemm_q8_0_q8_0(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, size_t bx,
                               const void * GGML_RESTRICT vy, size_t by, int nr, int nc);
#define LLAMUX_DET_GEMM_Q8_0(params, t) \
    ((params)->use_ref && (t) == GGML_TYPE_Q8_0 && ne02 == 1 && ne03 == 1 && ne12 == 1 && ne13 == 1 && \
     (ggml_is_contiguous(src1) || src1->type != GGML_TYPE_Q8_0) && nb0 == sizeof(float))
#endif

static void ggml_compute_forward_mul_mat_one_chunk(
`,
      },
      {
        find: '    // 16 * 2, accounting for mmla kernels\n    float tmp[32];\n',
        replace: `    // 16 * 2, accounting for mmla kernels
    float tmp[32];

#if defined(__AVX2__)
    // llamux det-gemm-q8_0: deterministic mode, Q8_0 weights, a plain 2-D product
    if (LLAMUX_DET_GEMM_Q8_0(params, type)) {
        // the whole chunk at once: 16 weight rows by every activation row (see the chunking)
        llamux_det_gemm_q8_0_q8_0((int)ne00, (float *)((char *)dst->data + ir1_start * nb1) + ir0_start, nb1 / sizeof(float),
                                  (const char *)src0->data + ir0_start * nb01, nb01,
                                  (const char *)wdata + ir1_start * row_size, row_size,
                                  (int)(ir0_end - ir0_start), (int)(ir1_end - ir1_start));
        return;
    }
#endif
`,
      },
      {
        // chunks of 16 weight rows by every activation row: each weight block is loaded once
        // per 4 activation rows and the weights are read once per product (16 x 16 chunks,
        // weight rows fastest, read them again for every 16 activation rows). Not below 4
        // rows (one sequence's decode): there the 64-row chunks were faster (0.69x vs 0.93x
        // of default mode, bench determinism)
        find: '    // The number of elements in each chunk\n    const int64_t dr0 = (nr0 + nchunk0 - 1) / nchunk0;\n',
        replace: `#if defined(__AVX2__)
    if (LLAMUX_DET_GEMM_Q8_0(params, src0->type) && nr1 >= 4) {
        nchunk0 = (nr0 + 15) / 16;
        nchunk1 = 1;
    }
#endif

    // The number of elements in each chunk
    const int64_t dr0 = (nr0 + nchunk0 - 1) / nchunk0;
`,
      },
    ],
  },
  {
    id: 'det-fa-fixed',
    // With use_ref (deterministic mode) flash attention runs llamux_det_flash_attn
    // (scripts/llama-patches/det-fa-fixed.cpp): the softmax maximum over the whole visible row
    // first, then the weights and the weighted V sums accumulated in 64-bit fixed point, so no
    // sum depends on the order of the cells (where they sit in the KV) or on the rows computed
    // beside them, and rows are computed in tiles. The kernel it replaces (det-fa-order) sorted
    // each row's cells by score: ~10x the default kernel's attention time on a 256-token prompt
    // and quadratic on long ones (about a minute per 2,000-token prompt on 2 threads). Checked by
    // test/determinism (every cache path byte for byte) and test/native/flash-attention.test.ts.
    file: FA_OPS,
    edits: [
      {
        find: '// Reduction function: combines partial results across KV chunks\n',
        replace: `${patchSource('det-fa-fixed.cpp')}// Reduction function: combines partial results across KV chunks\n`,
      },
      {
        find: '            if (use_tiled) {\n#ifdef LLAMUX_FA_TILED_KT\n',
        replace: '            if (use_ref) {\n                llamux_det_flash_attn(params, dst, ir0, ir1);\n            } else if (use_tiled) {\n#ifdef LLAMUX_FA_TILED_KT\n',
      },
    ],
  },
  {
    id: 'amx-broadcast-src0',
    // ggml's AMX matrix multiply (Sapphire Rapids and later, the sapphirerapids CPU variant)
    // offsets src0 by the batch plane of src1 as if both had as many planes: a weight matrix
    // broadcast over per-sequence planes (hybrid models split a batch by sequence: qwen35moe
    // with Q8_0 weights, 5+ sequences in one batch) was read past its end and those
    // sequences decoded zeros. Broadcast operands map to their own plane, as ggml's CPU
    // mul_mat does (test/gguf/zoo.test.ts, "beside 7 other sequences", on an AMX CPU).
    file: 'ggml/src/ggml-cpu/amx/mmq.cpp',
    edits: [
      {
        find: '    const int64_t i2 = batch_idx % ne2;\n    const int64_t i3 = batch_idx / ne2;\n    return i3 * t->nb[3] + i2 * t->nb[2];\n',
        replace:
          '    // a broadcast operand (src0: one weight matrix for every plane of src1) has fewer planes\n' +
          '    const int64_t i2 = (batch_idx % ne2) * t->ne[2] / ne2;\n' +
          '    const int64_t i3 = t->ne[3] == 1 ? 0 : batch_idx / ne2;\n' +
          '    return i3 * t->nb[3] + i2 * t->nb[2];\n',
      },
    ],
  },
  {
    id: 'det-amx',
    // Deterministic mode on AMX CPUs (sapphirerapids variant): ggml's AMX matrix multiply takes
    // a one-row AVX-512 VNNI kernel for one activation row and AMX tiles for more, whose sums run
    // in another order, so a row's logits changed with the rows decoded beside it (the paths-zoo
    // determinism sweep failed on qwen35, qwen35moe, lfm2 and gemma4 there). With use_ref every
    // row takes the one-row kernel.
    file: 'ggml/src/ggml-cpu/amx/mmq.cpp',
    edits: [
      {
        find: '    if (M == 1) {\n        // MB = 1 and handle 8 tiles in each block\n',
        replace: '    if (M == 1 || params->use_ref) {\n        // MB = 1 and handle 8 tiles in each block (use_ref: each of the M rows alone)\n',
      },
      {
        find: '        parallel_for_ggml(params, n_batch * NB, [&](int begin, int end) {\n',
        replace: '        parallel_for_ggml(params, n_batch * M * NB, [&](int begin, int end) {\n',
      },
      {
        find:
          '                    int batch_idx = i / NB;\n                    int nb = i % NB;\n\n' +
          '                    int64_t src0_offset = ggml_batch_offset(src0, batch_idx, ne2);\n' +
          '                    int64_t dst_offset  = ggml_batch_offset(dst,  batch_idx, ne2);\n' +
          '                    const char * wdata_batch = (const char *)wdata + batch_idx * row_size_A;\n',
        replace:
          '                    int batch_idx = i / NB / M;\n                    int m = i / NB % M;\n                    int nb = i % NB;\n\n' +
          '                    int64_t src0_offset = ggml_batch_offset(src0, batch_idx, ne2);\n' +
          '                    int64_t dst_offset  = ggml_batch_offset(dst,  batch_idx, ne2) + (int64_t) m * ldc;\n' +
          '                    const char * wdata_batch = (const char *)wdata + ((int64_t) batch_idx * M + m) * row_size_A;\n',
      },
    ],
  },
  {
    id: 'mtmd-cpu-threadpool',
    // libmtmd computes the projector's CPU graphs without a thread pool, so ggml starts and
    // joins fresh threads for every encode, while the engine's own pool workers (attached to
    // the llama context) still poll after the previous decode. On 2 cores a 640x400 screenshot
    // that encodes in ~10 ms took ~100 ms in one turn of three (bench multimodal suite, encode
    // timed in MediaStep) and 1.5-2 s beside other work. llama-server avoids it with OpenMP.
    // The engine encodes on its own thread, between its decodes: it lends the projector the
    // context's pool for the encode (mtmd_set_cpu_threadpool, then nullptr again).
    file: 'tools/mtmd/clip.h',
    edits: [
      {
        find: 'void clip_free(struct clip_ctx * ctx);\n',
        replace: 'void clip_free(struct clip_ctx * ctx);\n\n// llamux: compute the CPU graphs on this ggml thread pool (nullptr: threads per graph)\nvoid clip_set_cpu_threadpool(struct clip_ctx * ctx, struct ggml_threadpool * threadpool);\n',
      },
    ],
  },
  {
    id: 'mtmd-cpu-threadpool-clip',
    file: 'tools/mtmd/clip.cpp',
    edits: [
      {
        find: 'void clip_free(clip_ctx * ctx) {\n',
        replace: `void clip_set_cpu_threadpool(clip_ctx * ctx, ggml_threadpool * threadpool) {
    if (ctx == nullptr || ctx->backend_cpu == nullptr) {
        return;
    }
    ggml_backend_dev_t dev = ggml_backend_get_device(ctx->backend_cpu);
    ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : nullptr;
    auto set_fn = reg ? (void (*)(ggml_backend_t, ggml_threadpool_t)) ggml_backend_reg_get_proc_address(reg, "ggml_backend_cpu_set_threadpool") : nullptr;
    if (set_fn) {
        set_fn(ctx->backend_cpu, threadpool);
    }
}

void clip_free(clip_ctx * ctx) {
`,
      },
    ],
  },
  {
    id: 'mtmd-cpu-threadpool-api',
    file: 'tools/mtmd/mtmd.h',
    edits: [
      {
        find: 'MTMD_API void mtmd_free(mtmd_context * ctx);\n',
        replace: 'MTMD_API void mtmd_free(mtmd_context * ctx);\n\n// llamux: encode on this ggml CPU thread pool (the caller\'s, computed on its thread); nullptr: threads per graph\nMTMD_API void mtmd_set_cpu_threadpool(mtmd_context * ctx, struct ggml_threadpool * threadpool);\n',
      },
    ],
  },
  {
    id: 'mtmd-cpu-threadpool-impl',
    file: 'tools/mtmd/mtmd.cpp',
    edits: [
      {
        find: 'void mtmd_free(mtmd_context * ctx) {\n',
        replace: `void mtmd_set_cpu_threadpool(mtmd_context * ctx, struct ggml_threadpool * threadpool) {
    clip_set_cpu_threadpool(ctx->ctx_v, threadpool);
    clip_set_cpu_threadpool(ctx->ctx_a, threadpool);
}

void mtmd_free(mtmd_context * ctx) {
`,
      },
    ],
  },
  {
    id: 'vulkan-headers-1.3.239',
    // Debian 12's libvulkan-dev (Vulkan headers 1.3.239) predates VK_EXT_layer_settings (1.3.261),
    // which ggml-vulkan uses only to ask the validation layer (GGML_VULKAN_VALIDATE) for its
    // best-practice checks. With older headers the instance is created without that request,
    // so the backend builds from Debian's packages (issue 28, `npm run test:vulkan`).
    file: 'ggml/src/ggml-vulkan/ggml-vulkan.cpp',
    edits: [
      {
        find: '    VkBool32 enable_best_practice = layer_settings;\n',
        replace: '#if defined(VK_EXT_layer_settings)\n    VkBool32 enable_best_practice = layer_settings;\n',
      },
      {
        find: '    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, &layer_setting_info);\n',
        replace:
          '    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, &layer_setting_info);\n' +
          '#else\n    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);\n#endif\n',
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
