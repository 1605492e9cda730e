// The reference forward pass of a scripted model (float64), and the script descriptions it
// yields: each script's greedy tokens, its near-tie branches and its canonical path.
import type { ScriptBranch, ScriptDescription, ScriptOutcome, ScriptSpec, ScriptStep, TieStep } from './scripted-types.js';
import type { SpmVocab } from './vocab.js';

/** Rope base of the flag heads: their last rotary pair barely turns. */
export const ROPE_BASE = 1e9;

export function isTie(s: ScriptStep): s is TieStep {
  return typeof s === 'object';
}

export function expectedGreedy(s: ScriptSpec, vocab: SpmVocab): number[] {
  return s.continuation.map((step) => vocab.id(isTie(step) ? step.token : step));
}

export function describeScript(name: string, prompt: number[], sim: Simulator, vocab: SpmVocab): ScriptDescription {
  // Greedy path with the near ties along it.
  const greedy: number[] = [];
  const branches: ScriptBranch[] = [];
  let state = sim.start(prompt);
  let stop = -1;
  for (let i = 0; i < 100000; i++) {
    const probs = sim.probabilities(state);
    const ranked = rank(probs);
    const top = ranked[0]!;
    const alternatives = ranked.filter((r) => r.p >= 1e-3);
    if (alternatives.length > 1) {
      branches.push({
        index: greedy.length,
        after: state.tokens[state.tokens.length - 1]!,
        choices: alternatives.map((r) => ({ token: r.id, piece: vocab.piece(r.id), probability: r.p })),
      });
    }
    if (sim.eog.has(top.id)) {
      stop = top.id;
      break;
    }
    greedy.push(top.id);
    state = sim.step(state, top.id);
  }
  // All outcomes with probability ≥ 1e-6.
  const outcomes: ScriptOutcome[] = [];
  const explore = (st: SimState, acc: number[], p: number, depth: number): void => {
    if (depth > greedy.length + 64) throw new RangeError(`Script "${name}": sampled continuation does not end`);
    const ranked = rank(sim.probabilities(st)).filter((r) => p * r.p >= 1e-6);
    for (const r of ranked) {
      if (sim.eog.has(r.id)) {
        outcomes.push({
          tokens: acc,
          pieces: acc.map((t) => vocab.piece(t)),
          text: vocab.detokenize(acc),
          probability: p * r.p,
        });
      } else {
        explore(sim.step(st, r.id), [...acc, r.id], p * r.p, depth + 1);
      }
    }
  };
  explore(sim.start(prompt), [], 1, 0);
  outcomes.sort((a, b) => b.probability - a.probability);
  const promptText = vocab.detokenize(prompt.slice(prompt[0] === vocab.bos && vocab.addBos ? 1 : 0));
  const canonical = vocab.tokenize(promptText + vocab.detokenize(greedy)).join() === [...prompt, ...greedy].join();
  return {
    name,
    prompt: promptText,
    promptTokens: prompt,
    greedy,
    greedyPieces: greedy.map((t) => vocab.piece(t)),
    greedyText: vocab.detokenize(greedy),
    stop,
    branches,
    outcomes,
    canonical,
  };
}

function rank(probs: Float64Array): Array<{ id: number; p: number }> {
  const out: Array<{ id: number; p: number }> = [];
  for (let i = 0; i < probs.length; i++) if (probs[i]! >= 1e-9) out.push({ id: i, p: probs[i]! });
  return out.sort((a, b) => b.p - a.p);
}

export interface ScriptedWeights {
  readonly D: number;
  readonly V: number;
  readonly K: number;
  readonly headDim: number;
  readonly nHead: number;
  readonly embd: Float32Array;
  readonly output: Float32Array;
  readonly wq: Float32Array;
  readonly wk: Float32Array;
  readonly wv: Float32Array;
  readonly wo: Float32Array;
}

interface SimState {
  readonly tokens: readonly number[];
  /** Roped keys and values of the flag heads, per position: [head][headDim]. */
  readonly keys: readonly Float64Array[];
  readonly values: readonly Float64Array[];
}

/**
 * Reference forward pass of the scripted network (float64), restricted to what is non-zero by
 * construction: the flag heads, then the output head on the nonzero rows.
 */
export class Simulator {
  readonly eog: ReadonlySet<number>;
  readonly #w: ScriptedWeights;
  readonly #rows: number[];

  constructor(w: ScriptedWeights, eog: readonly number[]) {
    this.#w = w;
    this.eog = new Set(eog);
    this.#rows = [];
    for (let t = 0; t < w.V; t++) {
      let nz = false;
      for (let j = 0; j < w.D && !nz; j++) nz = w.output[t * w.D + j] !== 0;
      if (nz) this.#rows.push(t);
    }
  }

  start(tokens: readonly number[]): SimState {
    let s: SimState = { tokens: [], keys: [], values: [] };
    for (const t of tokens) s = this.step(s, t);
    return s;
  }

  #hidden(t: number): Float64Array {
    const { D, embd } = this.#w;
    const h = new Float64Array(D);
    let ss = 0;
    for (let j = 0; j < D; j++) {
      h[j] = embd[t * D + j]!;
      ss += h[j]! * h[j]!;
    }
    const inv = 1 / Math.sqrt(ss / D + 1e-5);
    for (let j = 0; j < D; j++) h[j]! *= inv;
    return h;
  }

  #project(m: Float32Array, head: number, h: Float64Array, pos: number, rope: boolean): Float64Array {
    const { D, headDim } = this.#w;
    const out = new Float64Array(headDim);
    for (let i = 0; i < headDim; i++) {
      const row = (head * headDim + i) * D;
      let s = 0;
      for (let j = 0; j < D; j++) s += m[row + j]! * h[j]!;
      out[i] = s;
    }
    if (rope) {
      for (let i = 0; i < headDim; i += 2) {
        const theta = pos * ROPE_BASE ** (-i / headDim);
        const c = Math.cos(theta);
        const sn = Math.sin(theta);
        const x0 = out[i]!;
        const x1 = out[i + 1]!;
        out[i] = x0 * c - x1 * sn;
        out[i + 1] = x0 * sn + x1 * c;
      }
    }
    return out;
  }

  step(s: SimState, token: number): SimState {
    const { K, wk, wv } = this.#w;
    const pos = s.tokens.length;
    const h = this.#hidden(token);
    const keys = new Float64Array(K * this.#w.headDim);
    const values = new Float64Array(K * this.#w.headDim);
    for (let k = 0; k < K; k++) {
      keys.set(this.#project(wk, k, h, pos, true), k * this.#w.headDim);
      values.set(this.#project(wv, k, h, pos, false), k * this.#w.headDim);
    }
    return { tokens: [...s.tokens, token], keys: [...s.keys, keys], values: [...s.values, values] };
  }

  /** Softmax over the vocabulary at the last position (temperature 1). */
  probabilities(s: SimState): Float64Array {
    const { D, V, K, headDim, wq, wo, embd, output } = this.#w;
    const last = s.tokens.length - 1;
    const t = s.tokens[last]!;
    const h = this.#hidden(t);
    const x = new Float64Array(D);
    for (let j = 0; j < D; j++) x[j] = embd[t * D + j]!;
    const scale = 1 / Math.sqrt(headDim);
    for (let k = 0; k < K; k++) {
      const q = this.#project(wq, k, h, last, true);
      const scores = new Float64Array(last + 1);
      let max = -Infinity;
      for (let p = 0; p <= last; p++) {
        const key = s.keys[p]!;
        let d = 0;
        for (let i = 0; i < headDim; i++) d += q[i]! * key[k * headDim + i]!;
        scores[p] = d * scale;
        if (scores[p]! > max) max = scores[p]!;
      }
      let z = 0;
      for (let p = 0; p <= last; p++) z += (scores[p] = Math.exp(scores[p]! - max));
      const head = new Float64Array(headDim);
      for (let p = 0; p <= last; p++) {
        const v = s.values[p]!;
        for (let i = 0; i < headDim; i++) head[i]! += (scores[p]! / z) * v[k * headDim + i]!;
      }
      for (let o = 0; o < D; o++) {
        let acc = 0;
        for (let i = 0; i < headDim; i++) acc += wo[o * D + k * headDim + i]! * head[i]!;
        x[o]! += acc;
      }
    }
    let ss = 0;
    for (let j = 0; j < D; j++) ss += x[j]! * x[j]!;
    const inv = 1 / Math.sqrt(ss / D + 1e-5);
    const logits = new Float64Array(V); // zero rows give logit 0
    for (const r of this.#rows) {
      let acc = 0;
      for (let j = 0; j < D; j++) acc += output[r * D + j]! * x[j]! * inv;
      logits[r] = acc;
    }
    let max = -Infinity;
    for (let i = 0; i < V; i++) if (logits[i]! > max) max = logits[i]!;
    let z = 0;
    for (let i = 0; i < V; i++) z += (logits[i] = Math.exp(logits[i]! - max));
    for (let i = 0; i < V; i++) logits[i]! /= z;
    return logits;
  }
}

/**
 * Builds a scripted model and writes it to `path` (atomically). Deterministic: the same spec
 * gives the same bytes.
 *
 * @throws RangeError for an inconsistent spec (see {@link buildScriptedModel}).
 */
