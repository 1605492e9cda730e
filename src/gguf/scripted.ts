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
import { ROPE_BASE, Simulator, describeScript, expectedGreedy, isTie, type ScriptedWeights } from './scripted-sim.js';
import type { BuiltScriptedModel, ScriptDescription, ScriptSpec, ScriptStep, ScriptedModelDescription, ScriptedModelSpec, TieStep } from './scripted-types.js';
import { val } from './types.js';
import type { GgufSpec, GgufTensorSpec, GgufValue } from './types.js';
import { buildSpmVocab } from './vocab.js';
import type { SpmVocab } from './vocab.js';
import { encodeGguf } from './writer.js';

export type * from './scripted-types.js';

const DEFAULT_TIE_GAP = Math.log(0.55 / 0.45);
const FLAG_SCORE = 40; // scaled attention score on a flag token

type Edge =
  | { kind: 'plain'; to: number }
  | { kind: 'tie'; a: number; b: number }
  | { kind: 'flag'; rule: number; a: number; b: number };


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
