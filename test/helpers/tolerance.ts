// Numeric tolerances derived from the arithmetic, not from one machine's result. Every CPU
// variant the package ships (x64, sse42, haswell, ..., sapphirerapids) computes the same
// float32 operations with its own vector width, blocking and FMA use, so sums come out in
// different orders and round differently. A tolerance must bound the rounding of any order:
// the bounds below are worst cases in the unit roundoff u, after Higham, "Accuracy and Stability
// of Numerical Algorithms" (2nd ed.): a dot product or sum of n terms, evaluated in any order,
// with or without FMA, is off by at most γ_n·Σ|x_k·y_k| where γ_n = n·u / (1 − n·u) (eq. 3.5).

import { expect } from 'vitest';

/** float32 machine epsilon, 2^-23 ≈ 1.19e-7 (the gap between 1 and the next float32). */
export const F32_EPSILON = 2 ** -23;
/** float32 unit roundoff u = ε/2 = 2^-24 ≈ 5.96e-8: one rounding to nearest is off by ≤ u·|x|. */
export const F32_UNIT_ROUNDOFF = F32_EPSILON / 2;
/** float64 unit roundoff, 2^-53 (JavaScript numbers). */
export const F64_UNIT_ROUNDOFF = 2 ** -53;
/** float16 unit roundoff, 2^-11 ≈ 4.88e-4 (normal range). */
export const F16_UNIT_ROUNDOFF = 2 ** -11;

/** γ_n = n·u / (1 − n·u): the relative error bound of a sum or dot product of n terms. */
export function gamma(n: number, u: number = F32_UNIT_ROUNDOFF): number {
  if (n * u >= 1) throw new RangeError(`gamma(${n}): n·u must be below 1`);
  return (n * u) / (1 - n * u);
}

/** The logits a scripted model's recipe designs (src/gguf/scripted.ts, `spec.logits` defaults):
 * the scripted successor 40, end of generation 20, every other token 0; a near tie's runner-up
 * sits ln(0.55/0.45) below the successor. */
export const SCRIPTED_LOGITS = { script: 40, eos: 20 } as const;
/** `llama.attention.layer_norm_rms_epsilon` of a scripted model. */
const SCRIPTED_RMS_EPSILON = 1e-5;

export interface ScriptedArithmetic {
  /** `nEmbd` of the model: the length of every dot product that makes a logit. */
  readonly nEmbd: number;
  /** `nVocab` of the model: the number of terms of the softmax. */
  readonly nVocab: number;
  /** Unit roundoff of the arithmetic that runs the forward pass and the softmax: float32 for
   * llama.cpp and the engine (the default), float64 for the JavaScript simulator. */
  readonly unitRoundoff?: number;
}

/**
 * Largest |computed − designed| of one logit of a scripted model whose designed value has
 * magnitude `logit` (and whose products all share its sign, below).
 *
 * The final hidden state is the current token's embedding x (the attention output and the FFN
 * are zero for these tokens), RMS-normed: h = x / sqrt(mean(x²) + ε_rms), and the logit is
 * l = Σ_k w_k·h_k over n = nEmbd channels. The recipe gives x an RMS of exactly 1 and makes a
 * successor's output row its predecessor's direction scaled (EOS reads the constant channel
 * alone), so every product w_k·h_k has the sign of l and Σ|w_k·h_k| = |l|. Relative to |l|:
 *   - storage: the GGUF holds w and x as float32, each rounded once:          2·u32
 *   - the design's ε_rms: h = x / sqrt(1 + ε_rms), not x:                        ε_rms / 2
 *   - the RMS norm's arithmetic: Σx² (n positive terms) γ_n, halved by the
 *     square root, then the division and the norm weight (1) add 2u:          γ_n / 2 + 2·u
 *   - the dot product, any order:                                             γ_n
 */
export function scriptedLogitError(logit: number, a: ScriptedArithmetic): number {
  const u = a.unitRoundoff ?? F32_UNIT_ROUNDOFF;
  const relative = 2 * F32_UNIT_ROUNDOFF + SCRIPTED_RMS_EPSILON / 2 + gamma(a.nEmbd, u) / 2 + 2 * u + gamma(a.nEmbd, u);
  return relative * Math.abs(logit);
}

/**
 * Largest |computed − designed| of a log-probability of a scripted model at a position whose
 * probable tokens are the scripted successor (logit 40), a near tie's runner-up or end of
 * generation (20): what `Math.log(0.55)`, `Math.log(0.45)` and `-20` may be off by.
 *
 * log p_t = l_t − logZ, logZ = log Σ_j exp(l_j). The three parts:
 *   1. the logits' errors δl_j: ∂ log p_t / ∂l_j = [j = t] − p_j, so
 *      |δ log p_t| ≤ |δl_t| + Σ_j p_j·|δl_j| ≤ 2·max_j |δl_j| = 2·scriptedLogitError(40)
 *   2. the log-softmax (native/sampling/logprobs.cc: float32 logits, the sum of exp(l − max) in
 *      double): rounding logZ = max + log Σ to float32 costs u·|logZ| ≤ u·(40 + ln V), and
 *      rounding l_t − logZ costs u·|log p_t| ≤ u·(2·40 + ln V)          →  u·(3·40 + 2·ln V)
 *   3. what the expected value leaves out: every other token's logit is ≥ 20 below the top
 *      (0, or EOS's 20 against 40), so together they hold at most V·e^-20 of the mass, and
 *      log(1 + x) ≤ x                                                     →  V·e^-20
 * The surface models (n = 128, V ≈ 300) in float32: 2·(1.67e-5·40) + 5.96e-8·(120 + 2·ln 300)
 * + 300·e^-20 ≈ 1.34e-3. Part 1 dominates: γ_n·|l| is what a dot product of 128 terms adding up to
 * 40 may be off by in the worst order (the haswell variant came out 5.3e-6 from ln 0.55).
 */
export function scriptedLogprobTolerance(a: ScriptedArithmetic): number {
  const u = a.unitRoundoff ?? F32_UNIT_ROUNDOFF;
  const L = SCRIPTED_LOGITS.script;
  const lnV = Math.log(a.nVocab);
  return 2 * scriptedLogitError(L, a) + u * (3 * L + 2 * lnV) + a.nVocab * Math.exp(-(L - SCRIPTED_LOGITS.eos));
}

/** |computed − designed| of a probability p of a scripted model: p·(e^t − 1) with t the
 * log-probability tolerance (p' = p·e^δ with |δ| ≤ t). */
export function scriptedProbabilityTolerance(p: number, a: ScriptedArithmetic): number {
  return p * Math.expm1(scriptedLogprobTolerance(a));
}

/**
 * How far below 0 the log-probability of a scripted model's greedy token may come out when every
 * other token is ≥ 20 below it (no near tie at that step). Exactly, log p_t = −log(1 + Σ_{j≠t}
 * e^(l_j − l_t)) ≥ −V·e^-20·e^(2δ) with δ = scriptedLogitError(40) (the logits' errors move each
 * difference by ≤ 2δ); the log-softmax's rounding of logZ adds u·(40 + ln V). (It never comes
 * out above 0: logZ = max + log Σ with log Σ ≥ 0 rounds to ≥ max.)
 */
export function scriptedGreedyLogprobFloor(a: ScriptedArithmetic): number {
  const u = a.unitRoundoff ?? F32_UNIT_ROUNDOFF;
  const L = SCRIPTED_LOGITS.script;
  const gap = L - SCRIPTED_LOGITS.eos;
  return -(a.nVocab * Math.exp(-gap + 2 * scriptedLogitError(L, a)) + u * (L + Math.log(a.nVocab)));
}

/**
 * Tolerance of a vector llamux scaled to unit length (src/engine/embedding.ts normalizeInPlace,
 * and the server's `dimensions` cut), measured by the test in float64 (test/helpers/embedding.ts
 * norm and unit): both for |‖v‖ − 1| and for max_i |unit(v)_i − v_i| against the test's own
 * scaling of the unscaled vector. llamux scales in float64 (Σv² of n float32 squares, each
 * exact in float64; the square root; one division per component) and stores each component as
 * float32, off by ≤ u32 relatively (and |v_i| ≤ 1), so ‖v‖ is off by ≤ u32 relatively; the
 * float64 sums and square roots (llamux's and the test's) add γ_(n+2) in float64 each.
 * Independent of the CPU variant: the pooled vector differs between variants, its scaling
 * does not.
 */
export function unitLengthTolerance(n: number): number {
  return F32_UNIT_ROUNDOFF + 2 * gamma(n + 2, F64_UNIT_ROUNDOFF);
}

/** |f16(f32(x)) − x| for x in float16's normal range (|x| ≥ 2^-14), as the GGUF writer stores
 * a number: rounded to float32 (≤ u32·|x|), then to float16 (≤ u16·|f32(x)|). */
export function f16RoundingBound(x: number): number {
  return (F16_UNIT_ROUNDOFF * (1 + F32_UNIT_ROUNDOFF) + F32_UNIT_ROUNDOFF) * Math.abs(x);
}

/**
 * max |x_i − decoded_i| of a Q8_0 block (src/gguf/quant.ts, ggml's quantize_row_q8_0_ref) whose
 * largest |x_i| is `amax`: d = fround(amax / 127) ≤ (amax / 127)·(1 + u32), q_i = round(x_i·fround(1/d))
 * where the two float32 roundings move x_i/d by ≤ 127·2·u32, so |x_i − q_i·d| ≤ d·(1/2 + 254·u32);
 * the scale is stored as float16, off by ≤ u16·d, times |q_i| ≤ 127; and a float64 input is
 * rounded to float32 first (≤ u32·amax).
 */
export function q8_0Error(amax: number): number {
  const d = (amax / 127) * (1 + F32_UNIT_ROUNDOFF);
  return d * (0.5 + 254 * F32_UNIT_ROUNDOFF) + 127 * d * F16_UNIT_ROUNDOFF + amax * F32_UNIT_ROUNDOFF;
}

/** Largest |decoded| of Q8_0 values whose largest |x_i| is `amax`: 127·f16(d) with
 * d = fround(amax / 127), so ≤ amax·(1 + u32)·(1 + u16). */
export function q8_0Max(amax: number): number {
  return amax * (1 + F32_UNIT_ROUNDOFF) * (1 + F16_UNIT_ROUNDOFF);
}

/** Asserts |actual − expected| ≤ tolerance, naming all three when it fails. */
export function expectWithin(actual: number, expected: number, tolerance: number, what?: string): void {
  expect(Math.abs(actual - expected), `${what ? `${what}: ` : ''}${actual} is not within ${tolerance} of ${expected}`).toBeLessThanOrEqual(tolerance);
}
