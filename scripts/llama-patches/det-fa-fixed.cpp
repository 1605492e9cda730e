// llamux (scripts/llama-patches.mjs, patch det-fa-fixed): deterministic mode's flash attention.
// A row's output must not depend on where its visible cells sit in the KV (a shared prefix, a
// fork, 8 interleaved sequences, a restored tier) nor on the rows computed beside it (a prompt
// prefilled at once or in chunks, one decoded token). Float sums depend on their order, so:
//  - every score is one dot product of its query and key rows (the same operations whatever
//    the batch), and the softmax maximum is taken over the whole visible row first (a max is exact
//    in any order), so each weight exp(s - max) is a function of the row's cells alone;
//  - the weighted V sum and the weight sum are accumulated in 64-bit fixed point: each term
//    w*v (one float product) is rounded to an integer multiple of 2^-F, and integer addition
//    is associative. F depends only on the row (its visible cell count and a bound on |V|), so
//    every sum is < 2^62 and every term < 2^51. The quantum (2^-32 for F16 V over 4,096 cells)
//    is far below F16's own resolution.
// No order has to be imposed, so rows are computed in tiles (one K row serves 32 queries, one V
// row converted once per tile) and masked cells are skipped freely. The previous deterministic
// kernel (det-fa-order) sorted each row's cells by score: quadratic in the prompt and ~10x the
// default tiled kernel's time on 256-token prompts.
#include <vector>

#define LLAMUX_DET_FA_TILE 32
#define LLAMUX_DET_FA_EXP_N 16 // exp runs on padded blocks of 16, so every weight takes one path

// Rows of one head sit a cell's stride apart and are reached through the list of visible
// cells, which the hardware prefetchers do not follow: without this, one-token steps over a
// 3,000-cell KV stalled on nearly every K and V row.
#define LLAMUX_DET_FA_PREFETCH 8
static inline void llamux_det_prefetch(const char * p, size_t n) {
#if defined(__GNUC__) || defined(__clang__)
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 3);
#elif defined(_M_X64) || defined(_M_IX86)
    for (size_t o = 0; o < n; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
#else
    (void) p; (void) n;
#endif
}

static inline int llamux_det_bitlen(uint64_t x) {
    int n = 0;
    while (x) { n++; x >>= 1; }
    return n;
}

// x[i] = exp(x[i]) for i < n (n a multiple of LLAMUX_DET_FA_EXP_N), one SIMD routine for all.
static void llamux_det_expf(float * x, int64_t n) {
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    for (int64_t i = 0; i < n; i += 16) _mm512_storeu_ps(x + i, ggml_v_expf(_mm512_loadu_ps(x + i)));
#elif defined(__AVX2__) && defined(__FMA__)
    for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(x + i, ggml_v_expf(_mm256_loadu_ps(x + i)));
#elif defined(__ARM_NEON) && defined(__aarch64__)
    for (int64_t i = 0; i < n; i += 4) vst1q_f32(x + i, ggml_v_expf(vld1q_f32(x + i)));
#else
    for (int64_t i = 0; i < n; i++) x[i] = expf(x[i]);
#endif
}

// F16 rows are read directly where the CPU converts F16 vectors (the conversion is exact, so a
// pre-converted row gives the same values).
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__))
#define LLAMUX_DET_F16_LOADS 1
#endif
static inline float llamux_det_f32(float x) { return x; }
static inline float llamux_det_f32(ggml_fp16_t x) { return GGML_CPU_FP16_TO_FP32(x); }
#if defined(__AVX512F__)
static inline __m512 llamux_det_load(const float * p) { return _mm512_loadu_ps(p); }
static inline __m512 llamux_det_load(const ggml_fp16_t * p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) p)); }
#elif defined(__AVX2__)
static inline __m256 llamux_det_load(const float * p) { return _mm256_loadu_ps(p); }
#if defined(__F16C__)
static inline __m256 llamux_det_load(const ggml_fp16_t * p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p)); }
#endif
#endif

// acc[d] += round(w[j]*v[j][d]) for the cells j < n_cells with a weight and d < n: each float
// product rounded to the nearest integer (ties to even) in every path below, so a dimension's
// result never depends on which path took it. Blocks of columns stay in registers across cells.
template <typename VT>
static void llamux_det_acc(int64_t * GGML_RESTRICT acc, const VT * const * v, const float * GGML_RESTRICT w, int64_t n_cells, int64_t n) {
    int64_t d = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    for (; d + 64 <= n; d += 64) {
        __m512i a[8];
        for (int i = 0; i < 8; i++) a[i] = _mm512_loadu_si512((const void *) (acc + d + 8*i));
        for (int64_t j = 0; j < n_cells; j++) {
            if (w[j] == 0.0f) continue;
            const __m512 wv = _mm512_set1_ps(w[j]);
            const VT * vj = v[j] + d;
            for (int i = 0; i < 4; i++) {
                const __m512 p = _mm512_mul_ps(wv, llamux_det_load(vj + 16*i));
                a[2*i]     = _mm512_add_epi64(a[2*i],     _mm512_cvtps_epi64(_mm512_castps512_ps256(p)));
                a[2*i + 1] = _mm512_add_epi64(a[2*i + 1], _mm512_cvtps_epi64(_mm512_extractf32x8_ps(p, 1)));
            }
        }
        for (int i = 0; i < 8; i++) _mm512_storeu_si512((void *) (acc + d + 8*i), a[i]);
    }
#elif defined(__AVX2__)
    // x + 1.5*2^52 rounds x (|x| < 2^51) to an integer held in the low mantissa bits
    const __m256d magic = _mm256_set1_pd(6755399441055744.0);
    const __m256i magic_bits = _mm256_castpd_si256(magic);
    for (; d + 16 <= n; d += 16) {
        __m256i a[4];
        for (int i = 0; i < 4; i++) a[i] = _mm256_loadu_si256((const __m256i *) (acc + d + 4*i));
        for (int64_t j = 0; j < n_cells; j++) {
            if (w[j] == 0.0f) continue;
            const __m256 wv = _mm256_set1_ps(w[j]);
            const VT * vj = v[j] + d;
            for (int i = 0; i < 2; i++) {
                const __m256 p = _mm256_mul_ps(wv, llamux_det_load(vj + 8*i));
                const __m256d lo = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(p)), magic);
                const __m256d hi = _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)), magic);
                a[2*i]     = _mm256_add_epi64(a[2*i],     _mm256_sub_epi64(_mm256_castpd_si256(lo), magic_bits));
                a[2*i + 1] = _mm256_add_epi64(a[2*i + 1], _mm256_sub_epi64(_mm256_castpd_si256(hi), magic_bits));
            }
        }
        for (int i = 0; i < 4; i++) _mm256_storeu_si256((__m256i *) (acc + d + 4*i), a[i]);
    }
#endif
    for (int64_t j = 0; j < n_cells; j++) {
        if (w[j] == 0.0f) continue;
        for (int64_t e = d; e < n; e++) {
            acc[e] += (int64_t) rint((double) (w[j]*llamux_det_f32(v[j][e])));
        }
    }
}

// The dot product of an F32 row and an F32 or F16 row: lanes in a fixed order, then a fixed
// reduction tree, so a pair's score is the same in a tile of 32 queries and in a one-token step.
template <typename KT>
static inline float llamux_det_dot(const float * GGML_RESTRICT a, const KT * GGML_RESTRICT b, int64_t n) {
    int64_t i = 0;
    float s = 0.0f;
#if defined(__AVX512F__)
    // four chains (64 elements a step), summed in a fixed tree
    __m512 acc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
    for (; i + 64 <= n; i += 64) {
        for (int c = 0; c < 4; c++) acc[c] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16*c), llamux_det_load(b + i + 16*c), acc[c]);
    }
    for (int c = 0; i + 16 <= n; i += 16, c++) acc[c] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), llamux_det_load(b + i), acc[c]);
    s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 acc4[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (; i + 32 <= n; i += 32) {
        for (int c = 0; c < 4; c++) acc4[c] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8*c), llamux_det_load(b + i + 8*c), acc4[c]);
    }
    for (int c = 0; i + 8 <= n; i += 8, c++) acc4[c] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), llamux_det_load(b + i), acc4[c]);
    const __m256 acc = _mm256_add_ps(_mm256_add_ps(acc4[0], acc4[1]), _mm256_add_ps(acc4[2], acc4[3]));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    s = _mm_cvtss_f32(h);
#endif
    for (; i < n; i++) s += a[i]*llamux_det_f32(b[i]);
    return s;
}

static void llamux_det_flash_attn(const ggml_compute_params * params, ggml_tensor * dst, int64_t ir0, int64_t ir1) {
    (void) params; // one kernel for every thread; the caller hands out the rows
    const ggml_tensor * q     = dst->src[0];
    const ggml_tensor * k     = dst->src[1];
    const ggml_tensor * v     = dst->src[2];
    const ggml_tensor * mask  = dst->src[3];
    const ggml_tensor * sinks = dst->src[4];

    GGML_TENSOR_LOCALS(int64_t, neq, q,   ne)
    GGML_TENSOR_LOCALS(size_t,  nbq, q,   nb)
    GGML_TENSOR_LOCALS(int64_t, nek, k,   ne)
    GGML_TENSOR_LOCALS(size_t,  nbk, k,   nb)
    GGML_TENSOR_LOCALS(int64_t, nev, v,   ne)
    GGML_TENSOR_LOCALS(size_t,  nbv, v,   nb)
    GGML_TENSOR_LOCALS(int64_t, ne,  dst, ne)
    GGML_TENSOR_LOCALS(size_t,  nb,  dst, nb)

    const int64_t DK   = nek0;
    const int64_t DV   = nev0;
    const int64_t n_kv = nek1;

    float scale = 1.0f, max_bias = 0.0f, logit_softcap = 0.0f;
    memcpy(&scale,         (float *) dst->op_params + 0, sizeof(float));
    memcpy(&max_bias,      (float *) dst->op_params + 1, sizeof(float));
    memcpy(&logit_softcap, (float *) dst->op_params + 2, sizeof(float));
    if (logit_softcap != 0) {
        scale /= logit_softcap;
    }

    const uint32_t n_head      = neq2;
    const uint32_t n_head_log2 = 1u << (uint32_t) floor(log2(n_head));
    const float m0 = powf(2.0f, -(max_bias       ) / n_head_log2);
    const float m1 = powf(2.0f, -(max_bias / 2.0f) / n_head_log2);

    ggml_type         const k_vec_dot_type = ggml_get_type_traits_cpu(k->type)->vec_dot_type;
    ggml_from_float_t const q_to_vec_dot   = ggml_get_type_traits_cpu(k_vec_dot_type)->from_float;
    ggml_vec_dot_t    const kq_vec_dot     = ggml_get_type_traits_cpu(k->type)->vec_dot;
    ggml_to_float_t   const v_to_float     = ggml_get_type_traits(v->type)->to_float;
    GGML_ASSERT(q_to_vec_dot && "fattn: unsupported K-type");
    GGML_ASSERT((v->type == GGML_TYPE_F32 || v->type == GGML_TYPE_F16 || v_to_float) && "fattn: unsupported V-type");

    const size_t q_row = ggml_row_size(k_vec_dot_type, DK);
    const int64_t T = LLAMUX_DET_FA_TILE;

    static thread_local std::vector<char>    t_q;      // T query rows in K's vec_dot type
    static thread_local std::vector<int64_t> t_cells;  // cells visible to some row of the tile
    static thread_local std::vector<float>   t_w;      // T x cells: scores, then weights
    static thread_local std::vector<float>   t_x;      // one row's exponent arguments
    static thread_local std::vector<float>   t_vmax;   // per cell max |v| (V types other than F16)
    static thread_local std::vector<float>   t_v;      // a block of V rows in F32
    static thread_local std::vector<int64_t> t_acc;    // T x DV fixed-point sums
    t_q.resize(T*q_row);
    char * const qd = t_q.data();
#if !defined(LLAMUX_DET_F16_LOADS)
    static thread_local std::vector<float>   t_k;      // one F16 K row in F32 (no F16 vector loads)
    t_k.resize(DK);
    float * const kd = t_k.data();
#endif
    const bool k_f32 = (k->type == GGML_TYPE_F16 || k->type == GGML_TYPE_F32) && q->type == GGML_TYPE_F32;
    t_acc.resize(T*DV);

    const int64_t VB = 32; // V rows converted at a time
    t_v.resize(VB*DV);

    for (int64_t ir = ir0; ir < ir1;) {
        const int64_t iq3 = ir/(neq2*neq1);
        const int64_t iq2 = (ir - iq3*neq2*neq1)/neq1;
        const int64_t iq1 = ir - iq3*neq2*neq1 - iq2*neq1;
        // a tile: consecutive query rows of one head
        const int64_t nt = std::min<int64_t>({ T, ir1 - ir, neq1 - iq1 });
        ir += nt;

        const uint32_t h = (uint32_t) iq2;
        const float slope = (max_bias > 0.0f) ? h < n_head_log2 ? powf(m0, h + 1) : powf(m1, 2*(h - n_head_log2) + 1) : 1.0f;
        const int64_t ik2 = iq2/(neq2/nek2), ik3 = iq3/(neq3/nek3);
        const int64_t iv2 = iq2/(neq2/nev2), iv3 = iq3/(neq3/nev3);

        const ggml_fp16_t * mp[LLAMUX_DET_FA_TILE];
        const float * qf[LLAMUX_DET_FA_TILE];
        for (int64_t r = 0; r < nt; r++) {
            const float * pq = (const float *) ((const char *) q->data + ((iq1 + r)*nbq1 + iq2*nbq2 + iq3*nbq3));
            qf[r] = pq;
            if (!k_f32) q_to_vec_dot(pq, qd + r*q_row, DK);
            mp[r] = mask ? (const ggml_fp16_t *) ((const char *) mask->data + (iq1 + r)*mask->nb[1] + (iq2%mask->ne[2])*mask->nb[2] + (iq3%mask->ne[3])*mask->nb[3]) : nullptr;
        }

        // the cells any row of the tile sees (32 at a time where all rows mask them)
        t_cells.clear();
        for (int64_t ic = 0; ic < n_kv; ic++) {
            if (!mask) {
                t_cells.push_back(ic);
                continue;
            }
            if ((ic & 31) == 0 && ic + 32 <= n_kv) {
                bool all = true;
                for (int64_t r = 0; r < nt && all; r++) all = llamux_fa_masked32(mp[r] + ic);
                if (all) {
                    ic += 31;
                    continue;
                }
            }
            for (int64_t r = 0; r < nt; r++) {
                if (*(const uint16_t *) &mp[r][ic] != 0xFC00) { // not -inf
                    t_cells.push_back(ic);
                    break;
                }
            }
        }
        const int64_t nc  = (int64_t) t_cells.size();
        const int64_t ncp = (nc + LLAMUX_DET_FA_EXP_N - 1)/LLAMUX_DET_FA_EXP_N*LLAMUX_DET_FA_EXP_N;
        t_w.resize(nt*ncp);
        t_x.resize(ncp);
        // (locals: the thread_local vectors would be reloaded around every call)
        float * const wd = t_w.data();
        float * const xd = t_x.data();
        float * const vd = t_v.data();
        const int64_t * const cells = t_cells.data();

        // scores: F16/F32 keys against F32 queries in F32, other key types by their vec_dot; one
        // K row is read once for the tile's rows
        const size_t k_row = ggml_row_size(k->type, DK);
        for (int64_t j = 0; j < nc; j++) {
            const int64_t ic = cells[j];
            const char * k_data = (const char *) k->data + (ic*nbk1 + ik2*nbk2 + ik3*nbk3);
            if (j + LLAMUX_DET_FA_PREFETCH < nc) {
                llamux_det_prefetch((const char *) k->data + (cells[j + LLAMUX_DET_FA_PREFETCH]*nbk1 + ik2*nbk2 + ik3*nbk3), k_row);
            }
#if !defined(LLAMUX_DET_F16_LOADS)
            if (k_f32 && k->type == GGML_TYPE_F16) {
                ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) k_data, kd, DK);
            }
#endif
            for (int64_t r = 0; r < nt; r++) {
                float s = -INFINITY;
                if (mp[r] && *(const uint16_t *) &mp[r][ic] == 0xFC00) {
                    wd[r*ncp + j] = s; // masked (-inf, the common case: no conversion)
                    continue;
                }
                const float mv = mp[r] ? slope*GGML_CPU_FP16_TO_FP32(mp[r][ic]) : 0.0f;
                if (mv != -INFINITY) {
                    if (k_f32) {
                        if (k->type == GGML_TYPE_F32) {
                            s = llamux_det_dot(qf[r], (const float *) k_data, DK);
                        } else {
#if defined(LLAMUX_DET_F16_LOADS)
                            s = llamux_det_dot(qf[r], (const ggml_fp16_t *) k_data, DK);
#else
                            s = llamux_det_dot(qf[r], (const float *) kd, DK);
#endif
                        }
                    } else {
                        kq_vec_dot(DK, &s, 0, k_data, 0, qd + r*q_row, 0, 1);
                    }
                    s = s*scale;
                    if (logit_softcap != 0.0f) {
                        s = logit_softcap*tanhf(s);
                    }
                    s += mv;
                }
                wd[r*ncp + j] = s;
            }
        }

        // a bound on |v| per cell, for V types whose range is not F16's
        if (v->type != GGML_TYPE_F16) {
            t_vmax.resize(nc);
            for (int64_t j = 0; j < nc; j++) {
                const char * v_data = (const char *) v->data + (cells[j]*nbv1 + iv2*nbv2 + iv3*nbv3);
                const float * vf = (const float *) v_data;
                if (v->type != GGML_TYPE_F32) {
                    v_to_float(v_data, vd, DV);
                    vf = vd;
                }
                float m = 0.0f;
                for (int64_t d = 0; d < DV; d++) m = std::max(m, fabsf(vf[d]));
                t_vmax[j] = m;
            }
        }

        // per row: the maximum, the weights, their fixed-point sum and the row's scale
        int64_t S_fix[LLAMUX_DET_FA_TILE];
        int     F_v[LLAMUX_DET_FA_TILE], F_s[LLAMUX_DET_FA_TILE];
        for (int64_t r = 0; r < nt; r++) {
            float * w = wd + r*ncp;
            float M = -INFINITY;
            int64_t n_vis = 0;
            float bound = 65504.0f; // F16
            if (v->type != GGML_TYPE_F16) bound = 0.0f;
            for (int64_t j = 0; j < nc; j++) {
                if (w[j] == -INFINITY) continue;
                n_vis++;
                M = std::max(M, w[j]);
                if (v->type != GGML_TYPE_F16) bound = std::max(bound, t_vmax[j]);
            }
            const float sink = sinks ? ((const float *) sinks->data)[h] : -INFINITY;
            if (n_vis == 0) {
                F_v[r] = 0; F_s[r] = 0; S_fix[r] = 0;
                continue;
            }
            M = std::max(M, sink);
            int e_b = 0;
            frexpf(bound, &e_b); // bound < 2^e_b
            const int len = llamux_det_bitlen((uint64_t) n_vis + 1);
            F_v[r] = std::min({ 34, 50 - e_b, 61 - e_b - len });
            F_s[r] = std::min(40, 61 - len);
            for (int64_t j = 0; j < ncp; j++) xd[j] = j < nc ? w[j] - M : 0.0f;
            llamux_det_expf(xd, ncp);
            int64_t S = 0;
            const float to_s = ldexpf(1.0f, F_s[r]);
            const float to_v = ldexpf(1.0f, F_v[r]);
            for (int64_t j = 0; j < nc; j++) {
                const float e = w[j] == -INFINITY ? 0.0f : xd[j];
                S += (int64_t) rint((double) (e*to_s)); // an integer below 2^41: exact
                w[j] = e*to_v; // exact: a power of two
            }
            if (sinks) {
                S += (int64_t) rint((double) (expf(sink - M)*to_s));
            }
            S_fix[r] = S;
        }

        // the weighted V sums: V rows converted once per block for a tile's rows, read directly
        // (F16 converted as it is loaded) for one or a few rows
        int64_t * const acc_base = t_acc.data();
        std::fill(acc_base, acc_base + nt*DV, 0);
#if defined(LLAMUX_DET_F16_LOADS)
        const bool v_direct = v->type == GGML_TYPE_F32 || (v->type == GGML_TYPE_F16 && nt < 4);
#else
        const bool v_direct = v->type == GGML_TYPE_F32;
#endif
        const size_t v_row = ggml_row_size(v->type, DV);
        for (int64_t j0 = 0; j0 < nc; j0 += VB) {
            const int64_t nb_ = std::min(VB, nc - j0);
            const char * v_rows[VB];
            for (int64_t j = 0; j < nb_; j++) {
                v_rows[j] = (const char *) v->data + (cells[j0 + j]*nbv1 + iv2*nbv2 + iv3*nbv3);
                llamux_det_prefetch(v_rows[j], v_row);
            }
            if (v_direct && v->type == GGML_TYPE_F32) {
                for (int64_t r = 0; r < nt; r++) llamux_det_acc(acc_base + r*DV, (const float * const *) v_rows, wd + r*ncp + j0, nb_, DV);
                continue;
            }
#if defined(LLAMUX_DET_F16_LOADS)
            if (v_direct) {
                for (int64_t r = 0; r < nt; r++) llamux_det_acc(acc_base + r*DV, (const ggml_fp16_t * const *) v_rows, wd + r*ncp + j0, nb_, DV);
                continue;
            }
#endif
            const float * vf_rows[VB];
            for (int64_t j = 0; j < nb_; j++) {
                float * vf = vd + j*DV;
                if (v->type == GGML_TYPE_F16) {
                    ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) v_rows[j], vf, DV);
                } else {
                    v_to_float(v_rows[j], vf, DV);
                }
                vf_rows[j] = vf;
            }
            for (int64_t r = 0; r < nt; r++) llamux_det_acc(acc_base + r*DV, vf_rows, wd + r*ncp + j0, nb_, DV);
        }

        for (int64_t r = 0; r < nt; r++) {
            float * out = (float *) ((char *) dst->data + (iq3*ne2*ne1 + iq2 + (iq1 + r)*ne1)*nb1);
            if (S_fix[r] == 0) {
                memset(out, 0, DV*sizeof(float));
                continue;
            }
            const int64_t * acc = acc_base + r*DV;
            const double k_out = ldexp(1.0, F_s[r] - F_v[r])/(double) S_fix[r];
            for (int64_t d = 0; d < DV; d++) {
                out[d] = (float) ((double) acc[d]*k_out);
            }
        }
    }
}
