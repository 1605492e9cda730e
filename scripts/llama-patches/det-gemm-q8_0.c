
// llamux det-gemm-q8_0 (issue 26): a Q8_0 x Q8_0 matrix multiply for deterministic mode whose
// every element is computed with exactly the operations of ggml_vec_dot_q8_0_q8_0 above (AVX2
// path: one fused multiply-add per 32-value block into an 8-lane accumulator, then
// hsum_float_8), so its results are bit-identical to one vec_dot per element, whatever the
// batch. It keeps 4 weight rows x LLAMUX_DET_RN activation rows of accumulators in registers,
// so a weight block is loaded once per LLAMUX_DET_RN activation rows instead of once per row.
// s[j*bs + i] = dot(weight row i, activation row j) for i < nr, j < nc.
#if defined(__AVX2__)
#if defined(__AVX512F__) && defined(__AVX512VL__)
#define LLAMUX_DET_RN 4 // 16 accumulators + 8 operands: 32 vector registers
#else
#define LLAMUX_DET_RN 2 // 8 accumulators + 6 operands: 16 vector registers
#endif
void llamux_det_gemm_q8_0_q8_0(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, size_t bx,
                               const void * GGML_RESTRICT vy, size_t by, int nr, int nc);
void llamux_det_gemm_q8_0_q8_0(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, size_t bx,
                               const void * GGML_RESTRICT vy, size_t by, int nr, int nc) {
    const int nb = n / QK8_0;
    int i = 0;
    for (; i + 4 <= nr; i += 4) {
        const block_q8_0 * x[4];
        for (int r = 0; r < 4; r++) x[r] = (const block_q8_0 *)((const char *)vx + (size_t)(i + r) * bx);
        int j = 0;
        for (; j + LLAMUX_DET_RN <= nc; j += LLAMUX_DET_RN) {
            const block_q8_0 * y[LLAMUX_DET_RN];
            for (int c = 0; c < LLAMUX_DET_RN; c++) y[c] = (const block_q8_0 *)((const char *)vy + (size_t)(j + c) * by);
            __m256 acc[4][LLAMUX_DET_RN];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
#pragma GCC unroll 4
                for (int c = 0; c < LLAMUX_DET_RN; c++) acc[r][c] = _mm256_setzero_ps();
            }
            for (int ib = 0; ib < nb; ++ib) {
                // the 4 weight scales at once: lane r of dxy is x[r].d * y[c].d, the very
                // product vec_dot forms (half to float is exact)
                const uint64_t hx = ((uint64_t)x[3][ib].d << 48) | ((uint64_t)x[2][ib].d << 32) | ((uint64_t)x[1][ib].d << 16) | (uint64_t)x[0][ib].d;
                const __m128 dx = _mm_cvtph_ps(_mm_set_epi64x(0, (int64_t)hx));
                // mul_sum_i8_pairs_float(x, y) spelled out (|x| . sign(y, x)), with |x| kept in
                // registers and x read again from memory for the sign: fewer live registers
                __m256i ax[4];
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const __m256i qx = _mm256_loadu_si256((const __m256i *)x[r][ib].qs);
                    ax[r] = _mm256_sign_epi8(qx, qx);
                }
#pragma GCC unroll 4
                for (int c = 0; c < LLAMUX_DET_RN; c++) {
                    const __m128 dxy = _mm_mul_ps(dx, _mm_set1_ps(GGML_CPU_FP16_TO_FP32(y[c][ib].d)));
                    const __m256 dxy2 = _mm256_set_m128(dxy, dxy);
                    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[c][ib].qs);
                    __m256 d[4];
                    d[0] = _mm256_shuffle_ps(dxy2, dxy2, 0x00);
                    d[1] = _mm256_shuffle_ps(dxy2, dxy2, 0x55);
                    d[2] = _mm256_shuffle_ps(dxy2, dxy2, 0xaa);
                    d[3] = _mm256_shuffle_ps(dxy2, dxy2, 0xff);
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++) {
#if __AVXVNNIINT8__
                        const __m256 q = mul_sum_i8_pairs_float(_mm256_loadu_si256((const __m256i *)x[r][ib].qs), qy);
#else
                        const __m256 q = mul_sum_us8_pairs_float(ax[r], _mm256_sign_epi8(qy, _mm256_loadu_si256((const __m256i *)x[r][ib].qs)));
#endif
                        acc[r][c] = _mm256_fmadd_ps(d[r], q, acc[r][c]);
                    }
                }
            }
            for (int r = 0; r < 4; r++) {
                for (int c = 0; c < LLAMUX_DET_RN; c++) s[(size_t)(j + c) * bs + i + r] = hsum_float_8(acc[r][c]);
            }
        }
        for (; j < nc; j++) {
            for (int r = 0; r < 4; r++) {
                ggml_vec_dot_q8_0_q8_0(n, &s[(size_t)j * bs + i + r], 0, x[r], 0, (const char *)vy + (size_t)j * by, 0, 1);
            }
        }
    }
    for (; i < nr; i++) {
        for (int j = 0; j < nc; j++) {
            ggml_vec_dot_q8_0_q8_0(n, &s[(size_t)j * bs + i], 0, (const char *)vx + (size_t)i * bx, 0, (const char *)vy + (size_t)j * by, 0, 1);
        }
    }
}
#endif
