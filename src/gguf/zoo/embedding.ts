/**
 * Embedding models for the zoo: random weights with a real tokenizer, written so llama.cpp's
 * embedding paths run on them.
 * - `bert`: a BERT-style encoder (non-causal attention, learned positions, post-layer norms,
 *   GELU FFN) with the real WordPiece vocabulary of bge-small (`ggml-vocab-bert-bge.gguf`),
 *   mean pooling.
 * - `bert-rank`: the same encoder with a classification head (`cls`, `cls.output`) and rank
 *   pooling: a cross-encoder reranker (one relevance score per query/document pair).
 * - `qwen3-embed`: the zoo's `qwen3` decoder (causal, KV cache) with last-token pooling, the
 *   layout of Qwen3-Embedding.
 * The weights carry no meaning: tests assert what follows from the math (norms, batch
 * invariance, pooling identities), never a semantic ranking.
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { hashSeed } from '../prng.js';
import { val } from '../types.js';
import type { GgufSpec, GgufValue } from '../types.js';
import { writeGgufFile } from '../writer.js';
import { DEFAULT_SCALES, loadZooVocab, ZooBuilder } from './builder.js';
import type { ZooSuccessors } from './builder.js';
import { buildZooSpec } from './index.js';

/** llama.cpp's `enum llama_pooling_type` values as written in `<arch>.pooling_type`. */
export const POOLING_TYPE = { none: 0, mean: 1, cls: 2, last: 3, rank: 4 } as const;
export type PoolingName = keyof typeof POOLING_TYPE;

export type EmbeddingModelName = 'bert' | 'bert-rank' | 'qwen3-embed';
export const EMBEDDING_MODEL_NAMES: readonly EmbeddingModelName[] = ['bert', 'bert-rank', 'qwen3-embed'];

/** What a test may know about a generated embedding model. */
export interface EmbeddingModelDescription {
  readonly name: EmbeddingModelName;
  readonly path: string;
  readonly fileSize: number;
  readonly arch: string;
  readonly nEmbd: number;
  readonly nLayer: number;
  readonly nVocab: number;
  /** The pooling the GGUF declares. */
  readonly pooling: PoolingName;
  /** Positions the encoder has (BERT: learned position embeddings). */
  readonly contextLength: number;
  readonly causal: boolean;
  /** qwen3-embed: the zoo's greedy construction ({@link zooGreedyChain}) still holds for generation. */
  readonly successors?: ZooSuccessors;
}

/** BERT dims: small enough to compute a float64 reference in tests. */
export const BERT_DIMS = { nEmbd: 64, nLayer: 2, nHead: 2, nFf: 128, contextLength: 512, eps: 1e-12 } as const;

const BERT_VOCAB = { file: 'ggml-vocab-bert-bge.gguf' } as const;

/** The shape of a generated BERT (default {@link BERT_DIMS}; benchmarks use bge-small's). */
export interface BertDims {
  readonly nEmbd: number;
  readonly nLayer: number;
  readonly nHead: number;
  readonly nFf: number;
  readonly contextLength: number;
  readonly eps: number;
}

/** bge-small-en-v1.5's shape (33 M parameters): a realistic cost for benchmarks. */
export const BGE_SMALL_DIMS: BertDims = { nEmbd: 384, nLayer: 12, nHead: 12, nFf: 1536, contextLength: 512, eps: 1e-12 };

async function bertSpec(vocabDir: string, seed: number, rank: boolean, dims: BertDims = BERT_DIMS, blockType: 'F32' | 'F16' = 'F32', tokenTypes: 'F32' | 'F16' = 'F32'): Promise<{ spec: GgufSpec; nVocab: number }> {
  const { nEmbd: E, nLayer, nHead, nFf, contextLength, eps } = dims;
  const vocab = await loadZooVocab(vocabDir, BERT_VOCAB);
  const nVocab = vocab.tokens.length;
  const name = rank ? 'bert-rank' : 'bert';
  const b = new ZooBuilder('bert', hashSeed(seed, `embed:${name}`), DEFAULT_SCALES, blockType);
  b.kv('feed_forward_length', val.u32(nFf))
    .kv('attention.head_count', val.u32(nHead))
    .kv('attention.layer_norm_epsilon', val.f32(eps))
    .kv('attention.causal', val.bool(false))
    .kv('pooling_type', val.u32(rank ? POOLING_TYPE.rank : POOLING_TYPE.mean));
  // Token rows ±1 so every token is far from the others; positions and token types small.
  b.rand('token_embd.weight', [E, nVocab], 1, 'F16')
    // F32 whatever the block type: BERT adds the type row with ggml_add, which takes no F16
    // operand (llamux refuses a file that stores it otherwise: `tokenTypes` writes one for tests)
    .rand('token_types.weight', [E, 2], 0.1, tokenTypes)
    .rand('position_embd.weight', [E, contextLength], 0.1, 'F32')
    .fill('token_embd_norm.weight', [E])
    .rand('token_embd_norm.bias', [E], 0.05);
  for (let i = 0; i < nLayer; i++) {
    const p = `blk.${i}`;
    b.rand(`${p}.attn_q.weight`, [E, E])
      .rand(`${p}.attn_q.bias`, [E], 0.05)
      .rand(`${p}.attn_k.weight`, [E, E])
      .rand(`${p}.attn_k.bias`, [E], 0.05)
      .rand(`${p}.attn_v.weight`, [E, E])
      .rand(`${p}.attn_v.bias`, [E], 0.05)
      .rand(`${p}.attn_output.weight`, [E, E])
      .rand(`${p}.attn_output.bias`, [E], 0.05)
      .fill(`${p}.attn_output_norm.weight`, [E])
      .rand(`${p}.attn_output_norm.bias`, [E], 0.05)
      .rand(`${p}.ffn_up.weight`, [E, nFf])
      .rand(`${p}.ffn_up.bias`, [nFf], 0.05)
      .rand(`${p}.ffn_down.weight`, [nFf, E])
      .rand(`${p}.ffn_down.bias`, [E], 0.05)
      .fill(`${p}.layer_output_norm.weight`, [E])
      .rand(`${p}.layer_output_norm.bias`, [E], 0.05);
  }
  if (rank) {
    b.rand('cls.weight', [E, E]).rand('cls.bias', [E], 0.05).rand('cls.output.weight', [E, 1], 1).rand('cls.output.bias', [1], 0.05);
  }
  const metadata: Array<readonly [string, GgufValue]> = [
    ['general.architecture', val.string('bert')],
    ['general.name', val.string(`llamux-zoo-${name}`)],
    ['general.description', val.string(`llamux model zoo: random-weight BERT encoder${rank ? ' reranker' : ''} (seed ${seed})`)],
    ['general.file_type', val.u32(1)],
    ['bert.context_length', val.u32(contextLength)],
    ['bert.embedding_length', val.u32(E)],
    ['bert.block_count', val.u32(nLayer)],
    ...b.metadata,
    ...vocab.metadata,
  ];
  return { spec: { metadata, tensors: b.tensors }, nVocab };
}

/** Writes a random-weight BERT encoder of any shape (benchmarks), with the bge vocabulary. */
export async function writeBertModel(
  path: string,
  vocabDir: string,
  options: { dims: BertDims; rank?: boolean; seed?: number; blockType?: 'F32' | 'F16'; tokenTypes?: 'F32' | 'F16' },
): Promise<{ path: string; fileSize: number }> {
  const { spec } = await bertSpec(vocabDir, options.seed ?? 1, options.rank ?? false, options.dims, options.blockType ?? 'F32', options.tokenTypes ?? 'F32');
  const layout = await writeGgufFile(path, spec);
  return { path, fileSize: layout.fileSize };
}

/** Builds the GGUF content of an embedding model. */
export async function buildEmbeddingSpec(
  name: EmbeddingModelName,
  vocabDir: string,
  seed = 1,
): Promise<{ spec: GgufSpec; description: Omit<EmbeddingModelDescription, 'path' | 'fileSize'> }> {
  if (name === 'qwen3-embed') {
    const built = await buildZooSpec('qwen3', { vocabDir, seed });
    const metadata = [...built.spec.metadata, ['qwen3.pooling_type', val.u32(POOLING_TYPE.last)] as const];
    const d = built.description;
    return {
      spec: { metadata, tensors: built.spec.tensors },
      description: { name, arch: 'qwen3', nEmbd: d.nEmbd, nLayer: d.nLayer, nVocab: d.nVocab, pooling: 'last', contextLength: 40960, causal: true, successors: d.successors },
    };
  }
  const rank = name === 'bert-rank';
  const { spec, nVocab } = await bertSpec(vocabDir, seed, rank);
  const { nEmbd, nLayer, contextLength } = BERT_DIMS;
  return { spec, description: { name, arch: 'bert', nEmbd, nLayer, nVocab, pooling: rank ? 'rank' : 'mean', contextLength, causal: false } };
}

/**
 * Writes the embedding models into `dir` once (`<name>-<key>.gguf`, the key hashing the
 * generator's source and the vocabulary file), with a `.json` description beside each.
 */
export async function ensureEmbeddingModels(dir: string, vocabDir: string): Promise<Record<EmbeddingModelName, EmbeddingModelDescription>> {
  await mkdir(dir, { recursive: true });
  const out = {} as Record<EmbeddingModelName, EmbeddingModelDescription>;
  for (const name of EMBEDDING_MODEL_NAMES) {
    const h = createHash('sha256');
    h.update([bertSpec, buildEmbeddingSpec, buildZooSpec, ZooBuilder, loadZooVocab].map(String).join('\n'));
    h.update(await readFile(join(vocabDir, name === 'qwen3-embed' ? 'ggml-vocab-qwen2.gguf' : BERT_VOCAB.file)));
    const base = `${name}-${h.digest('hex').slice(0, 16)}`;
    const path = join(dir, `${base}.gguf`);
    const jsonPath = join(dir, `${base}.json`);
    let d: EmbeddingModelDescription | undefined;
    try {
      d = JSON.parse(await readFile(jsonPath, 'utf8')) as EmbeddingModelDescription;
      if ((await stat(path)).size !== d.fileSize || d.path !== path) d = undefined;
    } catch {
      d = undefined;
    }
    if (!d) {
      const built = await buildEmbeddingSpec(name, vocabDir);
      const layout = await writeGgufFile(path, built.spec);
      d = { ...built.description, path, fileSize: layout.fileSize };
      const tmp = `${jsonPath}.${process.pid}.tmp`;
      await writeFile(tmp, `${JSON.stringify(d, null, 2)}\n`);
      await rename(tmp, jsonPath);
    }
    out[name] = d;
  }
  return out;
}
