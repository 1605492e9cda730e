// Embeddings and reranking on a Context (ctx.embed, ctx.rerank). The texts are tokenized here;
// the engine thread runs the jobs beside its decodes (native/engine/embedder.cc) and answers each
// with one `embedded` event, routed by EmbedJobs.
import { z } from 'zod';
import type { NativeEmbedJob, NativeEvent } from '../native/binding.js';
import { POOLING_TYPES, type PoolingType } from '../native/request-schema.js';
import { LlamuxError, abortError, toErrorCode } from '../errors.js';
import type { ModelHandle } from '../model/handle.js';
import { parseOptions } from '../options.js';
import { toInt32Array } from './tokens.js';

const abortSignal = z.custom<AbortSignal>((v) => v instanceof AbortSignal, { message: 'expected an AbortSignal' });

/** The pooling an embed call may ask for (rank pooling is rerank's). */
export type Pooling = Exclude<keyof typeof POOLING_TYPES, 'rank'>;

/** One input: text (tokenized with the model's special tokens, e.g. BERT's [CLS] … [SEP]) or token ids. */
const EmbedInputSchema = z.union([z.string(), z.instanceof(Int32Array), z.array(z.number().int().nonnegative())]);

/** One text, or a list of inputs (a bare token array is one input only inside a list). */
export const EmbedInputsSchema = z.union([z.string(), z.array(EmbedInputSchema).min(1, 'expected at least one input')]);

export const EmbedOptionsSchema = z
  .object({
    /** How token vectors become one vector: 'model' (the GGUF's pooling type), 'mean', 'cls' (first token), 'last'. */
    pooling: z.enum(['model', 'mean', 'cls', 'last']).default('model'),
    /** Scale every vector to unit Euclidean length. Default true. */
    normalize: z.boolean().default(true),
    signal: abortSignal.optional(),
  })
  .strict();
export type EmbedOptions = z.input<typeof EmbedOptionsSchema>;

export const RerankOptionsSchema = z
  .object({
    /** Keep the best `topN` results (default: all). */
    topN: z.number().int().positive().optional(),
    signal: abortSignal.optional(),
  })
  .strict();
export type RerankOptions = z.input<typeof RerankOptionsSchema>;

export interface EmbedResult {
  /** One vector per input, in input order (length: the model's embedding size). */
  readonly embeddings: Float32Array[];
  readonly dimensions: number;
  /** Tokens of all inputs together. */
  readonly promptTokens: number;
}

export interface RerankResult {
  /** Best first: each document's index in the input and its relevance score (the model's raw score). */
  readonly results: Array<{ index: number; score: number }>;
  readonly promptTokens: number;
}

interface Pending {
  resolve: (ev: { data: Float32Array; dims: number; promptTokens: number }) => void;
  reject: (e: unknown) => void;
  signal?: AbortSignal | undefined;
}

/** Embed jobs in flight on one context, and the routing of their `embedded` events. */
export class EmbedJobs {
  #jobs = new Map<number, Pending>();

  get size(): number {
    return this.#jobs.size;
  }

  add(id: number, p: Pending): void {
    this.#jobs.set(id, p);
  }

  deliver(ev: Extract<NativeEvent, { type: 'embedded' }>): void {
    const p = this.#jobs.get(ev.id);
    if (!p) return;
    this.#jobs.delete(ev.id);
    if (ev.code !== undefined) {
      p.reject(ev.code === 'ABORTED' ? abortError(p.signal, 'The embedding') : new LlamuxError(toErrorCode(ev.code), ev.message ?? 'Embedding failed'));
      return;
    }
    p.resolve({ data: ev.data ?? new Float32Array(0), dims: ev.dims ?? 0, promptTokens: ev.promptTokens ?? 0 });
  }

  failAll(err: () => LlamuxError): void {
    for (const [, p] of this.#jobs) p.reject(err());
    this.#jobs.clear();
  }
}

/** What embed/rerank need of their context. */
export interface EmbedPort {
  readonly model: ModelHandle;
  readonly jobs: EmbedJobs;
  nextId(): number;
  /** Throws when the context can run nothing more. */
  check(): void;
  submit(job: NativeEmbedJob): void;
  cancel(id: number): void;
  changed(): void;
}

// Without the signal: one listener per input would pile up on a long list; tokenizing is
// bounded, and the signal is checked once the tokens are there.
async function tokenize(model: ModelHandle, input: string | Int32Array | number[]): Promise<Int32Array> {
  if (typeof input !== 'string') return toInt32Array(input);
  return model.tokenizeAsync(input, { addSpecial: true, parseSpecial: false });
}

/** Submits one job and waits for its vectors (one `dims`-long vector per input). */
async function run(port: EmbedPort, inputs: Int32Array[], pooling: PoolingType, signal: AbortSignal | undefined): Promise<{ data: Float32Array; dims: number; promptTokens: number }> {
  port.check();
  if (signal?.aborted) throw abortError(signal, 'The embedding');
  let total = 0;
  for (const t of inputs) total += t.length;
  const tokens = new Int32Array(total);
  const lengths = new Int32Array(inputs.length);
  let at = 0;
  inputs.forEach((t, i) => {
    tokens.set(t, at);
    lengths[i] = t.length;
    at += t.length;
  });
  const id = port.nextId();
  const onAbort = () => port.cancel(id);
  const done = new Promise<{ data: Float32Array; dims: number; promptTokens: number }>((resolve, reject) => port.jobs.add(id, { resolve, reject, signal }));
  try {
    port.submit({ id, tokens, lengths, pooling });
  } catch (e) {
    port.jobs.deliver({ type: 'embedded', id, code: (e as { code?: string }).code ?? 'INTERNAL', message: (e as Error).message });
  }
  port.changed();
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    return await done;
  } finally {
    signal?.removeEventListener('abort', onAbort);
    port.changed();
  }
}

/** ctx.embed(inputs, options). */
export async function embed(port: EmbedPort, inputs: unknown, options: EmbedOptions | undefined): Promise<EmbedResult> {
  const o = parseOptions(EmbedOptionsSchema, options, 'embed options');
  const list = parseOptions(EmbedInputsSchema, inputs, 'embed inputs');
  const arr = typeof list === 'string' ? [list] : list;
  const tokens = await Promise.all(arr.map((x) => tokenize(port.model, x)));
  const r = await run(port, tokens, POOLING_TYPES[o.pooling], o.signal);
  const embeddings: Float32Array[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const v = r.data.slice(i * r.dims, (i + 1) * r.dims);
    if (o.normalize) normalizeInPlace(v);
    embeddings.push(v);
  }
  return { embeddings, dimensions: r.dims, promptTokens: r.promptTokens };
}

/** Scales `v` to unit Euclidean length (a zero vector stays zero). */
export function normalizeInPlace(v: Float32Array): void {
  let sum = 0;
  for (let i = 0; i < v.length; i++) sum += v[i]! * v[i]!;
  const norm = Math.sqrt(sum);
  if (norm > 0) for (let i = 0; i < v.length; i++) v[i] = v[i]! / norm;
}

/**
 * The pair a cross-encoder reads: the GGUF's `tokenizer.chat_template.rerank` with `{query}`
 * and `{document}` filled in when it has one, else BOS, query, separator, document, separator
 * (the separator: SEP where the vocabulary adds one, e.g. BERT's [CLS] q [SEP] d [SEP], else EOS).
 */
async function pairTokens(model: ModelHandle, query: string, doc: string): Promise<Int32Array> {
  const template = model.getMetadata('tokenizer.chat_template.rerank');
  const opts = (addSpecial: boolean, parseSpecial: boolean) => ({ addSpecial, parseSpecial });
  if (template !== undefined) {
    return model.tokenizeAsync(template.replaceAll('{query}', query).replaceAll('{document}', doc), opts(false, true));
  }
  const v = model.vocab;
  const q = await model.tokenizeAsync(query, opts(false, false));
  const d = await model.tokenizeAsync(doc, opts(false, false));
  const sep = v.addSep && v.sep >= 0 ? v.sep : v.eos >= 0 ? v.eos : v.sep;
  const out: number[] = [];
  if (v.addBos && v.bos >= 0) out.push(v.bos);
  out.push(...q);
  if (sep >= 0) out.push(sep);
  out.push(...d);
  if (sep >= 0) out.push(sep);
  return Int32Array.from(out);
}

/** ctx.rerank(query, documents, options): needs a reranker (rank pooling, e.g. bge-reranker). */
export async function rerank(port: EmbedPort, query: unknown, documents: unknown, options: RerankOptions | undefined): Promise<RerankResult> {
  const o = parseOptions(RerankOptionsSchema, options, 'rerank options');
  const q = parseOptions(z.string(), query, 'rerank query');
  const docs = parseOptions(z.array(z.string()).min(1, 'expected at least one document'), documents, 'rerank documents');
  const tokens = await Promise.all(docs.map((d) => pairTokens(port.model, q, d)));
  const r = await run(port, tokens, POOLING_TYPES.rank, o.signal);
  // n_cls_out scores per pair: the first is the relevance score
  const results = docs.map((_, index) => ({ index, score: r.data[index * r.dims]! }));
  results.sort((a, b) => b.score - a.score || a.index - b.index);
  return { results: o.topN === undefined ? results : results.slice(0, o.topN), promptTokens: r.promptTokens };
}
