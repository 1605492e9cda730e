// llamux (scripts/llama-patches.mjs, patch fa-tiled-kt): the tiled CPU flash-attention kernel
// with the scores computed transposed, KQ^T = K * Q^T. ggml's tiled kernel computes Q * K^T,
// which needs each K tile transposed to F32 for every Q tile and head, one scalar conversion
// per element, and converts the mask one element at a time; on a Zen 4 CPU those two loops
// took about 60 % of the kernel's time for a 248-token prompt over a 3,830-token KV (perf).
// Here Q is transposed once per Q tile, each K row is converted with the vector F16->F32
// routine, the online softmax runs across the query columns as vectors, and a mask tile is
// only read element by element when it is neither all visible nor all masked (the diagonal
// tiles of a prompt, or a batch of several sequences). A Q tile of fewer rows than the tile
// size computes only the vectors its rows fill (ggml's kernel always computes all 64).
// Same arithmetic as ggml's tiled kernel: dot products and the V accumulation in the same
// order with FMA; only the softmax denominator is summed in F32 per column instead of per row.
#if defined(GGML_SIMD) && !defined(__ARM_FEATURE_SVE) && !defined(__riscv_v_intrinsic) && !defined(LLAMUX_FA_NO_KT)
#define LLAMUX_FA_TILED_KT 1

// C[RM rows x RN vectors] += At^T * B: At is K x lda (the transposed A), B is K x N.
template <int RM, int RN>
static inline void llamux_gemm_at_ukernel(
        float       * GGML_RESTRICT C,
        const float * GGML_RESTRICT At, int lda,
        const float * GGML_RESTRICT B,
        int K, int N) {
    static constexpr int KN = GGML_F32_EPR;

    GGML_F32_VEC acc[RM][RN];
    for (int i = 0; i < RM; i++) {
        for (int r = 0; r < RN; r++) {
            acc[i][r] = GGML_F32_VEC_LOAD(C + i * N + r * KN);
        }
    }
    for (int kk = 0; kk < K; kk++) {
        GGML_F32_VEC Bv[RN];
        for (int r = 0; r < RN; r++) {
            Bv[r] = GGML_F32_VEC_LOAD(B + kk * N + r * KN);
        }
        for (int i = 0; i < RM; i++) {
            GGML_F32_VEC p = GGML_F32_VEC_SET1(At[kk * lda + i]);
            for (int r = 0; r < RN; r++) {
                acc[i][r] = GGML_F32_VEC_FMA(acc[i][r], Bv[r], p);
            }
        }
    }
    for (int i = 0; i < RM; i++) {
        for (int r = 0; r < RN; r++) {
            GGML_F32_VEC_STORE(C + i * N + r * KN, acc[i][r]);
        }
    }
}

template <int RM>
static inline void llamux_gemm_at_rows(float * C, const float * At, int lda, const float * B, int K, int N) {
    static constexpr int KN = GGML_F32_EPR;
    int jj = 0;
    for (; jj + GEMM_RN * KN <= N; jj += GEMM_RN * KN) {
        llamux_gemm_at_ukernel<RM, GEMM_RN>(C + jj, At, lda, B + jj, K, N);
    }
    for (; jj + KN <= N; jj += KN) {
        llamux_gemm_at_ukernel<RM, 1>(C + jj, At, lda, B + jj, K, N);
    }
    for (; jj < N; jj++) {
        for (int i = 0; i < RM; i++) {
            float a = C[i * N + jj];
            for (int kk = 0; kk < K; kk++) {
                a += At[kk * lda + i] * B[kk * N + jj];
            }
            C[i * N + jj] = a;
        }
    }
}

// C[M x N] += At^T * B, with At stored K x M.
static void llamux_gemm_at(float * C, const float * At, const float * B, int M, int K, int N) {
    int ii = 0;
    for (; ii + GEMM_RM <= M; ii += GEMM_RM) {
        llamux_gemm_at_rows<GEMM_RM>(C + ii * N, At + ii, M, B, K, N);
    }
    for (; ii < M; ii++) {
        llamux_gemm_at_rows<1>(C + ii * N, At + ii, M, B, K, N);
    }
}

// n rows of d values, each nb bytes after the previous one, into dst as F32 rows.
static inline void llamux_fa_rows_to_f32(float * dst, const char * src, size_t nb, int n, int64_t d, bool f16) {
    for (int r = 0; r < n; r++) {
        if (f16) {
            ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) (src + r*nb), dst + r*d, d);
        } else {
            memcpy(dst + r*d, src + r*nb, d*sizeof(float));
        }
    }
}

static void llamux_flash_attn_ext_tiled_kt(
        const ggml_compute_params * params,
        ggml_tensor * dst,
        int ir0, int ir1) {
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

    const int64_t DK = nek0;
    const int64_t DV = nev0;

    GGML_ASSERT(nbq0 == ggml_type_size(q->type));
    GGML_ASSERT(nbk0 == ggml_type_size(k->type));
    GGML_ASSERT(nbv0 == ggml_type_size(v->type));
    GGML_ASSERT(q->type == GGML_TYPE_F32);
    GGML_ASSERT(k->type == v->type);
    GGML_ASSERT(nb0 == sizeof(float));

    const bool kv_f16 = k->type == GGML_TYPE_F16;

    const int64_t rk2 = neq2/nek2;
    const int64_t rk3 = neq3/nek3;
    const int64_t rv2 = neq2/nev2;
    const int64_t rv3 = neq3/nev3;

    float scale         = 1.0f;
    float max_bias      = 0.0f;
    float logit_softcap = 0.0f;
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

    static constexpr int QT_SZ  = ggml_fa_tile_config::Q;
    static constexpr int KVT_SZ = ggml_fa_tile_config::KV;

    // The same per-thread scratch as ggml's tiled kernel (ggml_graph_plan sizes it).
    float * base  = (float *) params->wdata + params->ith*(QT_SZ*DK + 2*QT_SZ*KVT_SZ + QT_SZ*DV + KVT_SZ*DV + KVT_SZ*DK + CACHE_LINE_SIZE_F32);
    float * QT    = base;                      // DK x QT_SZ: the Q tile, transposed
    float * KQt   = QT + QT_SZ*DK;             // KVT_SZ x QT_SZ: scores, then probabilities
    float * VKQ32 = KQt + 2*QT_SZ*KVT_SZ;      // QT_SZ x DV: output accumulator
    float * V32   = VKQ32 + QT_SZ*DV;          // KVT_SZ x DV
    float * K32   = V32 + KVT_SZ*DV;           // KVT_SZ x DK: K rows in F32

    float M[QT_SZ], S[QT_SZ], Msub[QT_SZ], tmax[QT_SZ], colsum[QT_SZ];

    int ir = ir0;
    while (ir < ir1) {
        const int iq3 = ir/(neq2*neq1);
        const int iq2 = (ir - iq3*neq2*neq1)/neq1;
        const int iq1 = (ir - iq3*neq2*neq1 - iq2*neq1);
        const int tile_rows = MIN(QT_SZ, MIN((int)(ir1 - ir), (int)(neq1 - iq1)));
        GGML_ASSERT(tile_rows > 0);
        // Query columns in use, rounded up to whole vectors: a short batch costs what its rows need.
        const int qn = (tile_rows + GGML_F32_EPR - 1) / GGML_F32_EPR * GGML_F32_EPR;

        const uint32_t h = iq2;
        const float slope = (max_bias > 0.0f) ? h < n_head_log2 ? powf(m0, h + 1) : powf(m1, 2*(h - n_head_log2) + 1) : 1.0f;

        const int ik2 = iq2 / rk2;
        const int ik3 = iq3 / rk3;
        const int iv2 = iq2 / rv2;
        const int iv3 = iq3 / rv3;

        for (int i = 0; i < qn; i++) {
            M[i] = -INFINITY;
            S[i] = 0.0f;
        }
        memset(VKQ32, 0, qn*DV*sizeof(float));

        // Q tile transposed, padded columns zero (their scores are masked below).
        memset(QT, 0, qn*DK*sizeof(float));
        for (int tq = 0; tq < tile_rows; tq++) {
            const float * pq = (const float *) ((const char *) q->data + ((iq1 + tq)*nbq1 + iq2*nbq2 + iq3*nbq3));
            for (int64_t d = 0; d < DK; d++) {
                QT[d*qn + tq] = pq[d];
            }
        }

        const char * mask_rows = mask ? (const char *) mask->data + iq1*mask->nb[1] + (iq2%mask->ne[2])*mask->nb[2] + (iq3%mask->ne[3])*mask->nb[3] : nullptr;

        for (int64_t ic = 0; ic < nek1; ic += KVT_SZ) {
            const int kv_tile = (int) std::min((int64_t) KVT_SZ, nek1 - ic);

            // Is this mask tile all visible (+0), all masked (-inf), or mixed?
            bool mixed = false;
            if (mask_rows) {
                bool all_zero = true;
                bool all_inf  = true;
                for (int tq = 0; tq < tile_rows && (all_zero || all_inf); tq++) {
                    const uint16_t * mp = (const uint16_t *) (mask_rows + tq*mask->nb[1]) + ic;
                    uint16_t bits_or = 0, bits_and = 0xFFFF;
                    for (int tk = 0; tk < kv_tile; tk++) {
                        bits_or  |= mp[tk];
                        bits_and &= mp[tk];
                    }
                    all_zero = all_zero && bits_or == 0;
                    all_inf  = all_inf && bits_or == 0xFC00 && bits_and == 0xFC00;
                }
                if (all_inf) {
                    continue;
                }
                mixed = !all_zero;
            }

            // K rows in F32 (vector conversion), then KQ^T = K * Q^T.
            llamux_fa_rows_to_f32(K32, (const char *) k->data + ic*nbk1 + ik2*nbk2 + ik3*nbk3, nbk1, kv_tile, DK, kv_f16);
            memset(KQt, 0, KVT_SZ*qn*sizeof(float));
            simd_gemm(KQt, K32, QT, kv_tile, DK, qn);
            ggml_vec_scale_f32(kv_tile*qn, KQt, scale);

            if (logit_softcap != 0.0f) {
                ggml_vec_tanh_f32(kv_tile*qn, KQt, KQt);
                ggml_vec_scale_f32(kv_tile*qn, KQt, logit_softcap);
            }

            if (mixed) {
                for (int tq = 0; tq < tile_rows; tq++) {
                    const ggml_fp16_t * mp = (const ggml_fp16_t *) (mask_rows + tq*mask->nb[1]) + ic;
                    for (int tk = 0; tk < kv_tile; tk++) {
                        KQt[tk*qn + tq] += slope*GGML_CPU_FP16_TO_FP32(mp[tk]);
                    }
                }
            }
            // Padded query columns and KV rows take no weight.
            if (tile_rows < qn) {
                for (int tk = 0; tk < kv_tile; tk++) {
                    for (int tq = tile_rows; tq < qn; tq++) {
                        KQt[tk*qn + tq] = -INFINITY;
                    }
                }
            }

            // Online softmax across the query columns.
            for (int tq = 0; tq < qn; tq++) {
                tmax[tq] = -INFINITY;
            }
            for (int tk = 0; tk < kv_tile; tk++) {
                const float * row = KQt + tk*qn;
                for (int tq = 0; tq < qn; tq++) {
                    tmax[tq] = row[tq] > tmax[tq] ? row[tq] : tmax[tq];
                }
            }
            for (int tq = 0; tq < qn; tq++) {
                const float Mold = M[tq];
                const float Mnew = tmax[tq] > Mold ? tmax[tq] : Mold;
                if (Mnew > Mold) {
                    const float ms = expf(Mold - Mnew);
                    ggml_vec_scale_f32(DV, VKQ32 + tq*DV, ms);
                    S[tq] *= ms;
                }
                M[tq] = Mnew;
                Msub[tq] = Mnew == -INFINITY ? 0.0f : Mnew;  // a column masked so far stays at zero weight
                colsum[tq] = 0.0f;
            }
            for (int tk = 0; tk < kv_tile; tk++) {
                float * row = KQt + tk*qn;
                for (int tq = 0; tq < qn; tq++) {
                    row[tq] -= Msub[tq];
                }
                ggml_vec_soft_max_f32(qn, row, row, 0.0f);
                for (int tq = 0; tq < qn; tq++) {
                    colsum[tq] += row[tq];
                }
            }
            for (int tq = 0; tq < qn; tq++) {
                S[tq] += colsum[tq];
            }

            // VKQ += P * V, P read transposed from KQt.
            llamux_fa_rows_to_f32(V32, (const char *) v->data + ic*nbv1 + iv2*nbv2 + iv3*nbv3, nbv1, kv_tile, DV, kv_f16);
            llamux_gemm_at(VKQ32, KQt, V32, qn, kv_tile, DV);
        }

        if (sinks) {
            const float s = ((float *) ((char *) sinks->data))[h];
            for (int tq = 0; tq < tile_rows; tq++) {
                float ms = 1.0f;
                float vs = 1.0f;
                if (s > M[tq]) {
                    ms = expf(M[tq] - s);
                    ggml_vec_scale_f32(DV, VKQ32 + tq*DV, ms);
                } else {
                    vs = expf(s - M[tq]);
                }
                S[tq] = S[tq]*ms + vs;
            }
        }

        for (int tq = 0; tq < tile_rows; tq++) {
            const float S_inv = S[tq] == 0.0f ? 0.0f : 1.0f/S[tq];
            ggml_vec_scale_f32(DV, VKQ32 + tq*DV, S_inv);
            const int i1 = iq1 + tq;
            memcpy((char *) dst->data + (iq3*ne2*ne1 + iq2 + i1*ne1)*nb1, VKQ32 + tq*DV, nb1);
        }

        ir += tile_rows;
    }
}
#endif

