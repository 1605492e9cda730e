/**
 * The shared part of the model zoo: real vocabularies copied from llama.cpp's vocab-only GGUFs,
 * real chat templates, and the "successor" construction that gives every random-weight model a
 * known greedy continuation with a clear logit margin.
 *
 * The construction (the same idea as the scripted models, spread over a whole real vocabulary):
 * - a set S of 2^m plain word tokens (`Ġword`/`▁word`, NORMAL type) is chosen from the vocabulary;
 *   every token t of the vocabulary gets a successor succ(t) in S (S itself is one long cycle, the
 *   other tokens hash into it);
 * - channels [0, m) of the embedding of t carry the m-bit index of succ(t) in S as ±`codeScale`;
 *   the other channels are ±1 (a fixed pseudo-random sign per token and channel);
 * - row j of the output head is `headScale` × the index bits of j for j in S, zero for the others.
 * After the final RMS norm the hidden state of token t correlates with the row of succ(t) on all m
 * code channels, with any other row of S on at most m - 2 of them, and not at all with tokens
 * outside S: greedy decoding follows the successor chain, with a margin set by the two scales.
 * The blocks of each architecture (attention, recurrent, experts) get small random weights: they
 * change every logit a little (so exact comparisons see them) but not which token wins.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LlamaFileType, TokenType } from '../constants.js';
import type { GgmlTypeName } from '../constants.js';
import { Prng, hashSeed } from '../prng.js';
import { readGgufFile } from '../reader.js';
import { val } from '../types.js';
import type { GgufSpec, GgufTensorSpec, GgufValue } from '../types.js';

/** Bits of the successor code: |S| = 2^CODE_BITS. */
export const CODE_BITS = 10;
const S_SIZE = 1 << CODE_BITS;

/** Where the vocabulary of a zoo model comes from. */
export interface ZooVocabSource {
  /** Vocab-only GGUF in llama.cpp's `models/` (e.g. `ggml-vocab-qwen35.gguf`). */
  readonly file: string;
  /**
   * Special tokens written over placeholder entries (`[PADnnn]`, `<|reserved_special_token_n|>`),
   * in order, first placeholder first: for a family whose real vocabulary is not in the bundle,
   * so its chat template's control tokens are single tokens.
   */
  readonly overlay?: ReadonlyArray<{ readonly text: string; readonly type: 'CONTROL' | 'USER_DEFINED' }>;
  /** Token texts to use as BOS / EOS / EOT (looked up after the overlay). */
  readonly bos?: string;
  readonly eos?: string;
  readonly eot?: string;
  /** Set `tokenizer.ggml.add_bos_token`. */
  readonly addBos?: boolean;
}

/** A loaded vocabulary: the `tokenizer.*` metadata to copy and what the generator needs. */
export interface ZooVocab {
  readonly name: string;
  readonly metadata: ReadonlyArray<readonly [string, GgufValue]>;
  readonly tokens: readonly string[];
  readonly types: readonly number[];
}

const PLACEHOLDER = /^(\[PAD\d+\]|<\|reserved_special_token_\d+\|>)$/;

/** Reads the `tokenizer.*` keys of a vocab-only GGUF and applies the overlay. */
export async function loadZooVocab(vocabDir: string, source: ZooVocabSource): Promise<ZooVocab> {
  const file = await readGgufFile(join(vocabDir, source.file));
  const tokensValue = file.metadata.get('tokenizer.ggml.tokens');
  const typesValue = file.metadata.get('tokenizer.ggml.token_type');
  if (tokensValue?.type !== 'array' || typesValue?.type !== 'array') {
    throw new Error(`${source.file} has no tokenizer.ggml.tokens/token_type arrays`);
  }
  const tokens = [...(tokensValue.value as readonly string[])];
  const types = [...(typesValue.value as readonly number[])];
  if (source.overlay?.length) {
    let next = 0;
    for (const o of source.overlay) {
      if (tokens.includes(o.text)) continue;
      while (next < tokens.length && !PLACEHOLDER.test(tokens[next]!)) next++;
      if (next >= tokens.length) throw new Error(`${source.file}: no placeholder left for ${o.text}`);
      tokens[next] = o.text;
      types[next] = TokenType[o.type];
      next++;
    }
  }
  const idOf = (text: string): number => {
    const id = tokens.indexOf(text);
    if (id < 0) throw new Error(`${source.file} has no token ${text}`);
    return id;
  };
  const overrides = new Map<string, GgufValue>();
  if (source.bos) overrides.set('tokenizer.ggml.bos_token_id', val.u32(idOf(source.bos)));
  if (source.eos) overrides.set('tokenizer.ggml.eos_token_id', val.u32(idOf(source.eos)));
  if (source.eot) overrides.set('tokenizer.ggml.eot_token_id', val.u32(idOf(source.eot)));
  if (source.addBos !== undefined) overrides.set('tokenizer.ggml.add_bos_token', val.bool(source.addBos));
  const metadata: Array<readonly [string, GgufValue]> = [];
  for (const [key, value] of file.metadata) {
    if (!key.startsWith('tokenizer.') || key === 'tokenizer.chat_template') continue;
    if (key === 'tokenizer.ggml.tokens') metadata.push([key, val.array('string', tokens)]);
    else if (key === 'tokenizer.ggml.token_type') metadata.push([key, val.array('i32', types)]);
    else if (overrides.has(key)) metadata.push([key, overrides.get(key)!]);
    else metadata.push([key, value]);
    overrides.delete(key);
  }
  for (const [key, value] of overrides) metadata.push([key, value]);
  return { name: source.file.replace(/^ggml-vocab-/, '').replace(/\.gguf$/, ''), metadata, tokens, types };
}

/** Reads a chat template from llama.cpp's `models/templates`. */
export async function loadZooTemplate(templatesDir: string, file: string): Promise<string> {
  return readFile(join(templatesDir, file), 'utf8');
}

/** What a test needs to predict a zoo model's greedy output (JSON-serializable). */
export interface ZooSuccessors {
  readonly seed: number;
  /** The token ids of S, in the order of their code index. */
  readonly set: readonly number[];
  /** `cycle[k]` = code index of the successor of `set[k]`. */
  readonly cycle: readonly number[];
}

const WORD = /^(Ġ|▁)[a-z]{3,8}$/;

/** Chooses S and the cycle through it. */
export function chooseSuccessors(vocab: ZooVocab, seed: number): ZooSuccessors {
  const set: number[] = [];
  for (let id = 0; id < vocab.tokens.length && set.length < S_SIZE; id++) {
    if (vocab.types[id] === TokenType.NORMAL && WORD.test(vocab.tokens[id]!)) set.push(id);
  }
  if (set.length < S_SIZE) throw new Error(`vocabulary ${vocab.name} has only ${set.length} plain word tokens`);
  const order = Array.from({ length: S_SIZE }, (_, i) => i);
  const prng = new Prng(hashSeed(seed, 'zoo-cycle'));
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(prng.next() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const cycle = new Array<number>(S_SIZE);
  for (let i = 0; i < S_SIZE; i++) cycle[order[i]!] = order[(i + 1) % S_SIZE]!;
  return { seed, set, cycle };
}

/** 32-bit integer hash (murmur3 fmix32 of a seeded value). */
function mix32(x: number): number {
  x = x >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b) >>> 0;
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35) >>> 0;
  x ^= x >>> 16;
  return x >>> 0;
}

/** Code index (into `s.set`) of the successor of every token of a vocabulary of `nVocab`. */
export function successorCodes(s: ZooSuccessors, nVocab: number): Int32Array {
  const codes = new Int32Array(nVocab);
  const salt = hashSeed(s.seed, 'zoo-succ');
  for (let t = 0; t < nVocab; t++) codes[t] = mix32(salt ^ Math.imul(t, 0x9e3779b1)) & (S_SIZE - 1);
  s.set.forEach((id, k) => {
    codes[id] = s.cycle[k]!;
  });
  return codes;
}

/** The token greedy decoding is built to pick after `token`. */
export function zooSuccessor(s: ZooSuccessors, token: number): number {
  const k = s.set.indexOf(token);
  if (k >= 0) return s.set[s.cycle[k]!]!;
  const salt = hashSeed(s.seed, 'zoo-succ');
  return s.set[mix32(salt ^ Math.imul(token, 0x9e3779b1)) & (S_SIZE - 1)]!;
}

/** The `n` tokens greedy decoding is built to produce after a prompt ending in `last`. */
export function zooGreedyChain(s: ZooSuccessors, last: number, n: number): number[] {
  const out: number[] = [];
  let t = last;
  for (let i = 0; i < n; i++) {
    t = zooSuccessor(s, t);
    out.push(t);
  }
  return out;
}

/** Shapes common to every zoo model. */
export interface ZooCommonShape {
  readonly nEmbd: number;
  readonly nLayer: number;
  readonly contextLength: number;
}

/** Scales of the successor construction. */
export interface ZooScales {
  /** Magnitude of the code channels of the embeddings (the others are ±1). Default 3. */
  readonly codeScale: number;
  /** Magnitude of the code channels of the output head. Default 2. */
  readonly headScale: number;
  /** Random block weights are uniform in ±gain/sqrt(fan-in). Default 0.5. */
  readonly gain: number;
}

export const DEFAULT_SCALES: ZooScales = { codeScale: 3, headScale: 2, gain: 0.5 };

/** Helpers a family uses to declare its tensors and metadata. */
export class ZooBuilder {
  readonly metadata: Array<[string, GgufValue]> = [];
  readonly tensors: GgufTensorSpec[] = [];

  constructor(
    readonly arch: string,
    readonly seed: number,
    readonly scales: ZooScales,
    /** Type of the block matrices (see {@link ZooBuilder.rand}). */
    readonly blockType: 'F32' | 'F16' | 'Q8_0' = 'F32',
  ) {}

  /** `<arch>.<suffix>` = value. */
  kv(suffix: string, value: GgufValue): this {
    this.metadata.push([`${this.arch}.${suffix}`, value]);
    return this;
  }

  /**
   * Uniform random weights in ±gain/sqrt(shape[0]) (or ±scale). Matrices (`*.weight`, 2-D or
   * more, rows a multiple of 32) take the builder's block type, except convolution kernels and
   * expert routers; vectors and biases stay F32.
   */
  rand(name: string, shape: readonly number[], scale?: number, type?: GgmlTypeName): this {
    const s = scale ?? this.scales.gain / Math.sqrt(shape[0]!);
    let prng: Prng | undefined;
    const seed = this.seed;
    this.tensors.push({
      name,
      shape,
      type: type ?? (isBlockMatrix(name, shape) ? this.blockType : 'F32'),
      data: (start, out) => {
        if (start === 0 || prng === undefined) prng = new Prng(hashSeed(seed, name));
        prng.fillUniform(out, s);
      },
    });
    return this;
  }

  /** A constant tensor (norm weights: 1). F32. */
  fill(name: string, shape: readonly number[], value = 1): this {
    this.tensors.push({ name, shape, type: 'F32', data: (_start, out) => out.fill(value) });
    return this;
  }

  /** An F32 tensor from a function of the element index. */
  values(name: string, shape: readonly number[], f: (i: number) => number): this {
    this.tensors.push({
      name,
      shape,
      type: 'F32',
      data: (start, out) => {
        for (let i = 0; i < out.length; i++) out[i] = f(start + i);
      },
    });
    return this;
  }
}

function isBlockMatrix(name: string, shape: readonly number[]): boolean {
  return (
    name.endsWith('.weight') &&
    shape.length >= 2 &&
    shape[0]! % 32 === 0 &&
    !/\.(ssm_conv1d|shortconv\.conv|ffn_gate_inp)\.weight$/.test(name)
  );
}

/** Token embedding and output head of the successor construction. */
export function successorTensors(
  s: ZooSuccessors,
  nVocab: number,
  nEmbd: number,
  scales: ZooScales,
  seed: number,
  embdType: GgmlTypeName,
  outputType: GgmlTypeName,
): { readonly embd: GgufTensorSpec; readonly output: GgufTensorSpec } {
  const codes = successorCodes(s, nVocab);
  const selfCode = new Int32Array(nVocab).fill(-1);
  s.set.forEach((id, k) => {
    selfCode[id] = k;
  });
  const embd = codeEmbedding('token_embd.weight', codes, nEmbd, scales, seed, embdType);
  const output: GgufTensorSpec = {
    name: 'output.weight',
    shape: [nEmbd, nVocab],
    type: outputType,
    data: (start, out) => {
      for (let i = 0; i < out.length; i++) {
        const idx = start + i;
        const t = Math.floor(idx / nEmbd);
        const ch = idx - t * nEmbd;
        const k = selfCode[t]!;
        out[i] = k < 0 || ch >= CODE_BITS ? 0 : (k >> ch) & 1 ? scales.headScale : -scales.headScale;
      }
    },
  };
  return { embd, output };
}

/** A token embedding whose code channels carry `codes[t]` for token t (the others ±1). */
function codeEmbedding(name: string, codes: Int32Array, nEmbd: number, scales: ZooScales, seed: number, type: GgmlTypeName): GgufTensorSpec {
  const salt = hashSeed(seed, 'zoo-embd');
  return {
    name,
    shape: [nEmbd, codes.length],
    type,
    data: (start, out) => {
      for (let i = 0; i < out.length; i++) {
        const idx = start + i;
        const t = Math.floor(idx / nEmbd);
        const ch = idx - t * nEmbd;
        if (ch < CODE_BITS) out[i] = (codes[t]! >> ch) & 1 ? scales.codeScale : -scales.codeScale;
        else out[i] = mix32(salt ^ Math.imul(idx, 0x9e3779b1)) & 1 ? 1 : -1;
      }
    },
  };
}

/**
 * The token embedding of a multi-token-prediction block that agrees with the trunk on a share
 * `agreement` of the tokens: for the others (chosen by a hash of the token) it codes a different
 * successor, so the head's draft after that token is wrong. With agreement 1 a model needs no
 * such tensor (the block reads the trunk's embedding).
 */
export function mtpEmbedding(
  s: ZooSuccessors,
  nVocab: number,
  nEmbd: number,
  scales: ZooScales,
  seed: number,
  type: GgmlTypeName,
  name: string,
  agreement: number,
): GgufTensorSpec {
  const codes = successorCodes(s, nVocab);
  const salt = hashSeed(seed, 'zoo-mtp-agreement');
  for (let t = 0; t < nVocab; t++) {
    if (mix32(salt ^ Math.imul(t, 0x9e3779b1)) / 2 ** 32 >= agreement) codes[t] = codes[t]! ^ 1;
  }
  return codeEmbedding(name, codes, nEmbd, scales, seed, type);
}

/** `general.file_type` for the type of the largest tensors. */
export function fileTypeOf(type: GgmlTypeName): number {
  return type === 'Q8_0' ? LlamaFileType.MOSTLY_Q8_0 : type === 'F16' ? LlamaFileType.MOSTLY_F16 : LlamaFileType.ALL_F32;
}

export type { GgufSpec };
