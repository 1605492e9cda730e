/**
 * Scripted llama models: 1-block llama GGUFs whose greedy output is a chosen token script
 * (see DESIGN.md, "Test models (the recipe)").
 *
 * How the weights encode the script:
 * - Embedding = constant channel (1) + per-flag feature channels + a "seen" channel per flag +
 *   a random part. Tokens that have a scripted successor ("predecessors") get mutually
 *   orthogonal random parts; every other token's random part is orthogonal to all of them. Each
 *   embedding has RMS 1, so the RMS norms are (nearly) the identity.
 * - `attn_output` and `ffn_down` are zero (except the flag heads' value → "seen" channel), so
 *   the final hidden state is the current token's embedding.
 * - The output row of successor `s` is Σ over its predecessors p of (logit / |r_p|²)·r_p, so at p
 *   the scripted successor gets exactly `scriptLogit` and every other scripted row gets 0.
 * - The EOS row has `eosLogit` on the constant channel: any unscripted token ends generation.
 * - Near ties: the alternative's row is scaled to `scriptLogit - tieGap`.
 * - Flags: head k attends by content to flag token k (query from the constant channel, key from
 *   the flag channel, in the head's last rotary pair; rope base 1e9 so that pair barely turns;
 *   scaled score ≈ 40) and copies its feature into "seen" channel k. The trigger's two
 *   candidate rows get ±`flagGap` on that channel, which flips the choice once the flag has
 *   appeared anywhere earlier in the context.
 */
import { rename, writeFile } from 'node:fs/promises';
import { LlamaFileType } from './constants.js';
import { Prng, hashSeed } from './prng.js';
import { val } from './types.js';
import type { GgufSpec, GgufTensorSpec, GgufValue } from './types.js';
import { buildSpmVocab } from './vocab.js';
import type { SpecialTokenSpec, SpmVocab } from './vocab.js';
import { encodeGguf } from './writer.js';

/** A near tie: `token` is the greedy choice, `alt` the runner-up branch, which rejoins the script after `token`. */
export interface TieStep {
  readonly token: string;
  readonly alt: readonly string[];
}

/** One script step: a piece, or a near-tie branch point. */
export type ScriptStep = string | TieStep;

/** A prompt and its scripted greedy continuation. */
export interface ScriptSpec {
  readonly name: string;
  /**
   * The prompt, as vocabulary pieces (`▁` for spaces; special tokens and `<0xNN>` allowed), or as
   * `{ text }` tokenized with the model's own vocabulary (parse_special on). Its last token
   * triggers the continuation.
   */
  readonly prompt: readonly string[] | { readonly text: string };
  /** The greedy continuation, EOS excluded (every script ends with EOS). */
  readonly continuation: readonly ScriptStep[];
}

/** Context-dependent successor: once `flag` has appeared anywhere in the context, `trigger` is followed by `with`, else by `without`. */
export interface FlagRule {
  readonly flag: string;
  readonly trigger: string;
  readonly without: string;
  readonly with: string;
}

/** Logit levels of a scripted model (defaults in parentheses). */
export interface ScriptedLogits {
  /** Logit of the scripted successor (40). */
  readonly script?: number;
  /** Logit of EOS at every token (20). */
  readonly eos?: number;
  /** Gap between a near tie's two successors (ln(0.55/0.45) ≈ 0.2007: 55 % / 45 % at temperature 1). */
  readonly tieGap?: number;
  /** Margin of a flag rule's chosen successor over the other one (20). */
  readonly flagGap?: number;
}

/** Everything {@link buildScriptedModel} needs. */
export interface ScriptedModelSpec {
  readonly name: string;
  readonly seed?: number;
  /** Special tokens (markers, chat tokens), added after the byte tokens. */
  readonly special?: readonly SpecialTokenSpec[];
  /** Extra NORMAL pieces for the vocabulary (prompt/script pieces are added automatically). */
  readonly extraWords?: readonly string[];
  /** End-of-sequence token text (default `</s>`). */
  readonly eos?: string;
  readonly scripts: readonly ScriptSpec[];
  readonly flags?: readonly FlagRule[];
  /** Stored as `tokenizer.chat_template`. */
  readonly chatTemplate?: string;
  /** Named marker texts, described with their token ids (e.g. `{ toolCallStart: '<tool_call>' }`). */
  readonly markers?: Readonly<Record<string, string>>;
  /** Hidden size; default: the smallest multiple of 64 (≥ 128) that fits the script. */
  readonly nEmbd?: number;
  /** Head size (64). */
  readonly headDim?: number;
  /** Feed-forward size (64). */
  readonly nFf?: number;
  /** `llama.context_length` (8192). */
  readonly contextLength?: number;
  readonly logits?: ScriptedLogits;
  /** Encoding of the matrix weights (output head, attention, feed-forward): quantized
   * variants run llama.cpp's quantized kernels (default F32). The embeddings stay F32. */
  readonly weightType?: 'F32' | 'F16' | 'Q8_0' | 'Q4_0';
}

/** A possible sampled continuation and its probability at temperature 1 (no other samplers). */
export interface ScriptOutcome {
  readonly tokens: readonly number[];
  readonly pieces: readonly string[];
  readonly text: string;
  readonly probability: number;
}

/** A near-tie point on the greedy path. */
export interface ScriptBranch {
  /** Index in `greedy` of the token that may be replaced by an alternative. */
  readonly index: number;
  /** The token before the branch (the last prompt token when `index` is 0). */
  readonly after: number;
  /** Choices at temperature 1, most likely first (the first is the greedy one). */
  readonly choices: ReadonlyArray<{ readonly token: number; readonly piece: string; readonly probability: number }>;
}

/** What a test needs to know about one script. */
export interface ScriptDescription {
  readonly name: string;
  /** Prompt text: tokenize with add_special (BOS) and parse_special on. */
  readonly prompt: string;
  /** The prompt's tokens, BOS first. */
  readonly promptTokens: readonly number[];
  /** The greedy continuation, EOS excluded. */
  readonly greedy: readonly number[];
  readonly greedyPieces: readonly string[];
  /** `greedy` detokenized with special tokens rendered. */
  readonly greedyText: string;
  /** The end-of-generation token greedy decoding stops at. */
  readonly stop: number;
  /** Near ties along the greedy path (empty when the script has none). */
  readonly branches: readonly ScriptBranch[];
  /** Every continuation with probability ≥ 1e-6 at temperature 1, most likely first. */
  readonly outcomes: readonly ScriptOutcome[];
  /** Whether `prompt + greedyText` tokenizes back to `promptTokens` then `greedy`. */
  readonly canonical: boolean;
}

/** What a test needs to know about a scripted model. */
export interface ScriptedModelDescription {
  readonly name: string;
  /** File path ('' until written). */
  readonly path: string;
  readonly nVocab: number;
  readonly nEmbd: number;
  readonly nHead: number;
  readonly nLayer: number;
  readonly contextLength: number;
  readonly bos: number;
  readonly eos: number;
  readonly unk: number;
  /** Token ids llama.cpp treats as end of generation. */
  readonly eog: readonly number[];
  readonly addBos: boolean;
  readonly addSpacePrefix: boolean;
  /** Id of every piece the spec mentions (prompt pieces, script pieces, special tokens, flags). */
  readonly tokens: Readonly<Record<string, number>>;
  /** Special tokens (CONTROL / USER_DEFINED) by text, with their type. */
  readonly special: Readonly<Record<string, { readonly id: number; readonly type: 'CONTROL' | 'USER_DEFINED' }>>;
  /** Named markers, with their canonical tokenization (parse_special on, no BOS). */
  readonly markers: Readonly<Record<string, { readonly text: string; readonly tokens: readonly number[] }>>;
  /** Flag rules, as ids. */
  readonly flags: ReadonlyArray<{ readonly flag: number; readonly trigger: number; readonly without: number; readonly with: number }>;
  readonly chatTemplate?: string;
  readonly scripts: Readonly<Record<string, ScriptDescription>>;
}

/** A built model: the GGUF content and its description (path empty). */
export interface BuiltScriptedModel {
  readonly gguf: GgufSpec;
  readonly description: ScriptedModelDescription;
  readonly vocab: SpmVocab;
}

const DEFAULT_TIE_GAP = Math.log(0.55 / 0.45);
const ROPE_BASE = 1e9;
const FLAG_SCORE = 40; // scaled attention score on a flag token

type Edge =
  | { kind: 'plain'; to: number }
  | { kind: 'tie'; a: number; b: number }
  | { kind: 'flag'; rule: number; a: number; b: number };

function isTie(s: ScriptStep): s is TieStep {
  return typeof s === 'object';
}

/** Every piece a spec mentions, in first-mention order. */
function mentionedPieces(spec: ScriptedModelSpec): string[] {
  const out: string[] = [];
  const add = (p: string): void => {
    out.push(p);
  };
  for (const s of spec.scripts) {
    if (Array.isArray(s.prompt)) (s.prompt as readonly string[]).forEach(add);
    for (const step of s.continuation) {
      if (isTie(step)) {
        add(step.token);
        step.alt.forEach(add);
      } else add(step);
    }
  }
  for (const f of spec.flags ?? []) [f.flag, f.trigger, f.without, f.with].forEach(add);
  (spec.extraWords ?? []).forEach(add);
  return out;
}

const BYTE_RE = /^<0x[0-9A-F]{2}>$/;

/**
 * Builds a scripted model in memory and checks it: prompts must tokenize to their pieces, every
 * token must have one consistent successor (or a tie, or a flag rule), and a reference forward
 * pass of the built weights must reproduce each script greedily.
 *
 * @throws RangeError describing the first inconsistency in the spec.
 */
export function buildScriptedModel(spec: ScriptedModelSpec): BuiltScriptedModel {
  const seed = spec.seed ?? 1;
  const special = spec.special ?? [];
  const specialTexts = new Set(special.map((s) => s.text));
  const fixed = new Set(['<unk>', '<s>', '</s>']);
  const words = mentionedPieces(spec).filter((p) => !specialTexts.has(p) && !fixed.has(p) && !BYTE_RE.test(p));
  const vocab = buildSpmVocab({ special, words, eos: spec.eos ?? '</s>' });
  const V = vocab.size;
  const eos = vocab.eos;

  // ---- prompts and edges -------------------------------------------------------------------
  const promptIds = spec.scripts.map((s) => {
    if (Array.isArray(s.prompt)) {
      const bos = vocab.addBos ? [vocab.bos] : [];
      const ids = [...bos, ...(s.prompt as readonly string[]).map((p) => vocab.id(p))];
      const text = vocab.detokenize(ids.slice(bos.length));
      const again = vocab.tokenize(text);
      if (again.join() !== ids.join()) {
        throw new RangeError(
          `Script "${s.name}": prompt ${JSON.stringify(text)} tokenizes to [${again.map((i) => vocab.piece(i)).join(' | ')}], not to its pieces`,
        );
      }
      return ids;
    }
    return vocab.tokenize((s.prompt as { text: string }).text);
  });

  const observed = new Map<number, Array<{ to: number }>>();
  const ties = new Map<number, { a: number; b: number }>();
  const observe = (from: number, to: number): void => {
    let list = observed.get(from);
    if (list === undefined) observed.set(from, (list = []));
    if (!list.some((e) => e.to === to)) list.push({ to });
  };
  spec.scripts.forEach((s, si) => {
    const ids = promptIds[si]!;
    let prevs = [ids[ids.length - 1]!];
    for (const step of s.continuation) {
      if (isTie(step)) {
        const a = vocab.id(step.token);
        if (step.alt.length === 0) throw new RangeError(`Script "${s.name}": a tie needs an alternative`);
        const altIds = step.alt.map((p) => vocab.id(p));
        const b = altIds[0]!;
        for (const p of prevs) {
          const old = ties.get(p);
          if (old !== undefined && (old.a !== a || old.b !== b)) {
            throw new RangeError(`Token "${vocab.piece(p)}" has two different near ties`);
          }
          ties.set(p, { a, b });
        }
        for (let i = 0; i + 1 < altIds.length; i++) observe(altIds[i]!, altIds[i + 1]!);
        prevs = [a, altIds[altIds.length - 1]!];
      } else {
        const t = vocab.id(step);
        for (const p of prevs) observe(p, t);
        prevs = [t];
      }
    }
    for (const p of prevs) observe(p, eos);
  });

  const flagRules = (spec.flags ?? []).map((f) => ({
    flag: vocab.id(f.flag),
    trigger: vocab.id(f.trigger),
    without: vocab.id(f.without),
    with: vocab.id(f.with),
  }));
  const edges = new Map<number, Edge>();
  for (const [from, list] of observed) {
    const tie = ties.get(from);
    const ruleIndex = flagRules.findIndex((r) => r.trigger === from);
    if (tie !== undefined) {
      if (list.length > 0 || ruleIndex >= 0) {
        throw new RangeError(`Token "${vocab.piece(from)}" has a near tie and other successors`);
      }
      continue;
    }
    if (ruleIndex >= 0) {
      const r = flagRules[ruleIndex]!;
      for (const e of list) {
        if (e.to !== r.without && e.to !== r.with) {
          throw new RangeError(`Token "${vocab.piece(from)}" is followed by "${vocab.piece(e.to)}", which its flag rule does not allow`);
        }
      }
      edges.set(from, { kind: 'flag', rule: ruleIndex, a: r.without, b: r.with });
      continue;
    }
    if (list.length !== 1) {
      throw new RangeError(
        `Token "${vocab.piece(from)}" has several successors (${list.map((e) => `"${vocab.piece(e.to)}"`).join(', ')}); ` +
          'use distinct pieces, a near tie or a flag rule',
      );
    }
    edges.set(from, { kind: 'plain', to: list[0]!.to });
  }
  for (const [from, t] of ties) edges.set(from, { kind: 'tie', a: t.a, b: t.b });
  flagRules.forEach((r, i) => {
    if (!edges.has(r.trigger)) edges.set(r.trigger, { kind: 'flag', rule: i, a: r.without, b: r.with });
  });
  // A flag rule's candidates get constant/seen-channel weights, so they may follow only their trigger.
  for (const r of flagRules) {
    for (const cand of [r.without, r.with]) {
      for (const [from, e] of edges) {
        if (from === r.trigger) continue;
        const tos = e.kind === 'plain' ? [e.to] : [e.a, e.b];
        if (tos.includes(cand)) {
          throw new RangeError(`Flag candidate "${vocab.piece(cand)}" must follow only its trigger, but also follows "${vocab.piece(from)}"`);
        }
      }
    }
  }

  // ---- dimensions ----------------------------------------------------------------------------
  const K = flagRules.length;
  const preds = [...edges.keys()].sort((x, y) => x - y);
  const headDim = spec.headDim ?? 64;
  const minEmbd = 1 + 2 * K + preds.length + 32;
  const nEmbd = spec.nEmbd ?? Math.max(128, Math.ceil(minEmbd / 64) * 64);
  if (nEmbd < minEmbd) throw new RangeError(`nEmbd ${nEmbd} is too small for ${preds.length} scripted tokens (needs ${minEmbd})`);
  if (nEmbd % headDim !== 0) throw new RangeError(`nEmbd ${nEmbd} must be a multiple of headDim ${headDim}`);
  const nHead = nEmbd / headDim;
  if (K > nHead) throw new RangeError(`${K} flag rules need ${K} heads but the model has ${nHead}`);
  const nFf = spec.nFf ?? 64;
  const contextLength = spec.contextLength ?? 8192;
  const D = nEmbd;
  const R0 = 1 + 2 * K; // first random channel
  const dr = D - R0;
  const L = spec.logits?.script ?? 40;
  const beta = spec.logits?.eos ?? 20;
  const tieGap = spec.logits?.tieGap ?? DEFAULT_TIE_GAP;
  const flagGap = spec.logits?.flagGap ?? 20;

  // ---- embeddings ----------------------------------------------------------------------------
  const rng = new Prng(hashSeed(seed, `scripted:${spec.name}`));
  // A random orthogonal map: four Householder reflections.
  const reflections: Float64Array[] = [];
  for (let i = 0; i < 4; i++) {
    const v = new Float64Array(dr);
    let n2 = 0;
    for (let j = 0; j < dr; j++) {
      v[j] = rng.uniform(-1, 1);
      n2 += v[j]! * v[j]!;
    }
    const n = Math.sqrt(n2);
    for (let j = 0; j < dr; j++) v[j]! /= n;
    reflections.push(v);
  }
  const rotate = (x: Float64Array): void => {
    for (const v of reflections) {
      let d = 0;
      for (let j = 0; j < dr; j++) d += v[j]! * x[j]!;
      for (let j = 0; j < dr; j++) x[j]! -= 2 * d * v[j]!;
    }
  };
  const flagOf = new Map<number, number>();
  flagRules.forEach((r, k) => flagOf.set(r.flag, k));
  const predSlot = new Map<number, number>();
  preds.forEach((p, i) => predSlot.set(p, i));
  const embd = new Float32Array(V * D);
  const randomPart: Float64Array[] = new Array<Float64Array>(V);
  for (let t = 0; t < V; t++) {
    const r = new Float64Array(dr);
    const slot = predSlot.get(t);
    if (slot !== undefined) {
      r[slot] = 1;
    } else {
      let n2 = 0;
      for (let j = preds.length; j < dr; j++) {
        r[j] = rng.uniform(-1, 1);
        n2 += r[j]! * r[j]!;
      }
      const n = Math.sqrt(n2);
      for (let j = preds.length; j < dr; j++) r[j]! /= n;
    }
    rotate(r);
    const k = flagOf.get(t);
    const norm = Math.sqrt(D - 1 - (k === undefined ? 0 : 1));
    for (let j = 0; j < dr; j++) r[j]! *= norm;
    randomPart[t] = r;
    const row = t * D;
    embd[row] = 1;
    if (k !== undefined) embd[row + 1 + k] = 1;
    for (let j = 0; j < dr; j++) embd[row + R0 + j] = r[j]!;
  }

  // ---- output head ---------------------------------------------------------------------------
  const out = new Float64Array(V * D);
  const addPred = (row: number, p: number, logit: number): void => {
    const r = randomPart[p]!;
    let n2 = 0;
    for (let j = 0; j < dr; j++) n2 += r[j]! * r[j]!;
    const s = logit / n2;
    for (let j = 0; j < dr; j++) out[row * D + R0 + j]! += s * r[j]!;
  };
  out[eos * D] = beta;
  for (const [p, e] of edges) {
    if (e.kind === 'plain') addPred(e.to, p, L);
    else if (e.kind === 'tie') {
      addPred(e.a, p, L);
      addPred(e.b, p, L - tieGap);
    } else {
      addPred(e.a, p, L);
      addPred(e.b, p, L);
      const seen = 1 + K + e.rule;
      out[e.a * D + seen]! += -flagGap;
      out[e.b * D]! += -flagGap;
      out[e.b * D + seen]! += flagGap;
    }
  }
  const output = Float32Array.from(out);

  // ---- attention -----------------------------------------------------------------------------
  const A = Math.sqrt(FLAG_SCORE * Math.sqrt(headDim));
  const wq = new Float32Array(D * D);
  const wk = new Float32Array(D * D);
  const wv = new Float32Array(D * D);
  const wo = new Float32Array(D * D);
  for (let k = 0; k < K; k++) {
    const qRow = k * headDim + headDim - 2; // first dim of the head's last rotary pair
    wq[qRow * D + 0] = A;
    wk[qRow * D + 1 + k] = A;
    const vRow = k * headDim;
    wv[vRow * D + 1 + k] = 1;
    wo[(1 + K + k) * D + vRow] = 1;
  }
  const ones = new Float32Array(D).fill(1);
  const weights: ScriptedWeights = { D, V, K, headDim, nHead, embd, output, wq, wk, wv, wo };

  // ---- metadata ------------------------------------------------------------------------------
  const metadata: Array<[string, GgufValue]> = [
    ['general.architecture', val.string('llama')],
    ['general.name', val.string(`llamux-scripted-${spec.name}`)],
    ['general.description', val.string(`llamux scripted test model "${spec.name}" (generated, seed ${seed})`)],
    ['general.file_type', val.u32({ F32: LlamaFileType.ALL_F32, F16: LlamaFileType.MOSTLY_F16, Q8_0: LlamaFileType.MOSTLY_Q8_0, Q4_0: LlamaFileType.MOSTLY_Q4_0 }[spec.weightType ?? 'F32'])],
    ['llama.vocab_size', val.u32(V)],
    ['llama.context_length', val.u32(contextLength)],
    ['llama.embedding_length', val.u32(D)],
    ['llama.block_count', val.u32(1)],
    ['llama.feed_forward_length', val.u32(nFf)],
    ['llama.attention.head_count', val.u32(nHead)],
    ['llama.attention.head_count_kv', val.u32(nHead)],
    ['llama.rope.dimension_count', val.u32(headDim)],
    ['llama.rope.freq_base', val.f32(ROPE_BASE)],
    ['llama.attention.layer_norm_rms_epsilon', val.f32(1e-5)],
    ...vocab.metadata(),
  ];
  if (spec.chatTemplate !== undefined) metadata.push(['tokenizer.chat_template', val.string(spec.chatTemplate)]);
  const wt = spec.weightType ?? 'F32';
  const tensors: GgufTensorSpec[] = [
    { name: 'token_embd.weight', shape: [D, V], type: 'F32', data: embd },
    { name: 'output_norm.weight', shape: [D], type: 'F32', data: ones },
    { name: 'output.weight', shape: [D, V], type: wt, data: output },
    { name: 'blk.0.attn_norm.weight', shape: [D], type: 'F32', data: ones },
    { name: 'blk.0.attn_q.weight', shape: [D, D], type: wt, data: wq },
    { name: 'blk.0.attn_k.weight', shape: [D, D], type: wt, data: wk },
    { name: 'blk.0.attn_v.weight', shape: [D, D], type: wt, data: wv },
    { name: 'blk.0.attn_output.weight', shape: [D, D], type: wt, data: wo },
    { name: 'blk.0.ffn_norm.weight', shape: [D], type: 'F32', data: ones },
    { name: 'blk.0.ffn_gate.weight', shape: [D, nFf], type: wt, data: new Float32Array(D * nFf) },
    { name: 'blk.0.ffn_up.weight', shape: [D, nFf], type: wt, data: new Float32Array(D * nFf) },
    { name: 'blk.0.ffn_down.weight', shape: [nFf, D], type: wt, data: new Float32Array(D * nFf) },
  ];

  // ---- description (checked against a reference forward pass) --------------------------------
  const eog = [...new Set([eos, ...['</s>', '<|im_end|>', '<|eot_id|>', '<|endoftext|>'].map((t) => vocab.find(t)).filter((i) => i !== undefined)])].sort((x, y) => x - y);
  const sim = new Simulator(weights, eog);
  const scripts: Record<string, ScriptDescription> = {};
  spec.scripts.forEach((s, si) => {
    const prompt = promptIds[si]!;
    const expected = expectedGreedy(s, vocab);
    const d = describeScript(s.name, prompt, sim, vocab);
    if (d.greedy.join() !== expected.join() || d.stop !== eos) {
      throw new RangeError(
        `Script "${s.name}": the built weights continue greedily with [${d.greedy.map((i) => vocab.piece(i)).join(' | ')}] ` +
          `then "${vocab.piece(d.stop)}", not with the script`,
      );
    }
    scripts[s.name] = d;
  });

  const tokens: Record<string, number> = {};
  for (const p of mentionedPieces(spec)) tokens[p] = vocab.id(p);
  for (const s of special) tokens[s.text] = vocab.id(s.text);
  tokens['<s>'] = vocab.bos;
  tokens['</s>'] = vocab.id('</s>');
  tokens['<unk>'] = vocab.unk;
  const specialOut: Record<string, { id: number; type: 'CONTROL' | 'USER_DEFINED' }> = {};
  for (const s of special) specialOut[s.text] = { id: vocab.id(s.text), type: s.type };
  const markers: Record<string, { text: string; tokens: number[] }> = {};
  for (const [name, text] of Object.entries(spec.markers ?? {})) {
    markers[name] = { text, tokens: vocab.tokenize(text, { addSpecial: false }) };
  }

  const description: ScriptedModelDescription = {
    name: spec.name,
    path: '',
    nVocab: V,
    nEmbd: D,
    nHead,
    nLayer: 1,
    contextLength,
    bos: vocab.bos,
    eos,
    unk: vocab.unk,
    eog,
    addBos: vocab.addBos,
    addSpacePrefix: vocab.addSpacePrefix,
    tokens,
    special: specialOut,
    markers,
    flags: flagRules,
    ...(spec.chatTemplate === undefined ? {} : { chatTemplate: spec.chatTemplate }),
    scripts,
  };
  return { gguf: { metadata, tensors }, description, vocab };
}

/** The script's greedy path as piece ids (ties take their first choice). */
function expectedGreedy(s: ScriptSpec, vocab: SpmVocab): number[] {
  return s.continuation.map((step) => vocab.id(isTie(step) ? step.token : step));
}

function describeScript(name: string, prompt: number[], sim: Simulator, vocab: SpmVocab): ScriptDescription {
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

interface ScriptedWeights {
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
class Simulator {
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
export async function writeScriptedModel(path: string, spec: ScriptedModelSpec): Promise<ScriptedModelDescription> {
  const built = buildScriptedModel(spec);
  await writeBytesAtomic(path, encodeGguf(built.gguf));
  return { ...built.description, path };
}

let tmpCounter = 0;

/** Writes `bytes` to a temporary file beside `path`, then renames it into place. */
export async function writeBytesAtomic(path: string, bytes: Uint8Array): Promise<void> {
  const tmp = `${path}.${process.pid}.${++tmpCounter}.tmp`;
  await writeFile(tmp, bytes);
  await rename(tmp, path);
}
