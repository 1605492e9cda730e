// POST /v1/embeddings (OpenAI's shape, `encoding_format` float or base64) and POST /v1/rerank
// (the Jina / Cohere / llama-server shape: {query, documents, top_n} → {results: [{index,
// relevance_score}]}), both on the server's one context (ctx.embed, ctx.rerank).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import type { Context } from '../engine/context.js';
import { isLlamuxError } from '../errors.js';
import { HttpError, parseBody, readJson, sendJson } from './http.js';

/** The paths this module answers. */
export const EMBEDDING_PATHS = ['/v1/embeddings', '/embeddings', '/v1/rerank', '/rerank'] as const;
export function isEmbeddingPath(path: string): boolean {
  return (EMBEDDING_PATHS as readonly string[]).includes(path);
}

/** OpenAI's own limit on inputs per request. */
const MAX_INPUTS = 2048;

const nullable = <T extends z.ZodType>(t: T) => t.nullable().optional();
const isTokens = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t) && (t as number) >= 0);
const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isList = (v: unknown, item: (x: unknown) => boolean): boolean => Array.isArray(v) && v.length >= 1 && v.length <= MAX_INPUTS && v.every(item);

export const EmbeddingsRequestSchema = z
  .object({
    model: z.string().min(1).max(256),
    input: z.custom<string | string[] | number[] | number[][]>((v) => isText(v) || isTokens(v) || isList(v, isText) || isList(v, isTokens), {
      message: `a non-empty string, 1 to ${MAX_INPUTS} non-empty strings, an array of token ids, or 1 to ${MAX_INPUTS} arrays of token ids`,
    }),
    encoding_format: nullable(z.enum(['float', 'base64'])),
    /** Fewer dimensions: the vector is cut and scaled to unit length again (as OpenAI's v3 models). */
    dimensions: nullable(z.number().int().positive()),
    user: nullable(z.string()),
  })
  .strict();

const Document = z.union([z.string(), z.object({ text: z.string() }).strict()]);
export const RerankRequestSchema = z
  .object({
    model: nullable(z.string().max(256)),
    query: z.string(),
    documents: z.array(Document).min(1, 'expected at least one document').max(MAX_INPUTS),
    top_n: nullable(z.number().int().positive()),
    return_documents: nullable(z.boolean()),
    // Cohere: how many tokens of a document to read; the model's limit applies here
    max_tokens_per_doc: nullable(z.number().int().positive()),
  })
  .strict();

export interface EmbeddingHandlerOptions {
  readonly context: Context;
  readonly maxBodyBytes: number;
  readonly signal: AbortSignal;
}

/** UNSUPPORTED (not an embedding model / not a reranker) is the client's choice of server: 400. */
function clientError<T>(p: Promise<T>): Promise<T> {
  return p.catch((e: unknown) => {
    if (isLlamuxError(e) && e.code === 'UNSUPPORTED') throw new HttpError(400, 'invalid_request', e.message, 'model');
    throw e;
  });
}

function base64(v: Float32Array): string {
  // little-endian float32 bytes, as OpenAI sends them
  const bytes = Buffer.alloc(v.length * 4);
  for (let i = 0; i < v.length; i++) bytes.writeFloatLE(v[i]!, i * 4);
  return bytes.toString('base64');
}

async function handleEmbeddings(req: IncomingMessage, res: ServerResponse, o: EmbeddingHandlerOptions): Promise<void> {
  const body = parseBody(EmbeddingsRequestSchema, await readJson(req, o.maxBodyBytes));
  const input = body.input;
  const inputs: Array<string | number[]> = typeof input === 'string' ? [input] : input.length > 0 && typeof input[0] === 'number' ? [input as number[]] : (input as Array<string | number[]>);
  const n = o.context.model.metadata.embeddingSize;
  if (body.dimensions != null && body.dimensions > n) {
    throw new HttpError(400, 'invalid_request', `dimensions must be at most ${n} for this model`, 'dimensions');
  }
  // A model that declares no pooling (a chat model) is mean-pooled, as llama-server --embeddings --pooling mean.
  const m = o.context.model;
  const declared = Number(m.getMetadata(`${m.metadata.architecture}.pooling_type`) ?? 0);
  const r = await clientError(o.context.embed(inputs, { signal: o.signal, pooling: declared > 0 ? 'model' : 'mean' }));
  const data = r.embeddings.map((v, index) => {
    let e = v;
    if (body.dimensions != null && body.dimensions < v.length) {
      e = v.slice(0, body.dimensions);
      let s = 0;
      for (const x of e) s += x * x;
      const len = Math.sqrt(s);
      if (len > 0) for (let i = 0; i < e.length; i++) e[i] = e[i]! / len;
    }
    return { object: 'embedding', index, embedding: body.encoding_format === 'base64' ? base64(e) : Array.from(e) };
  });
  sendJson(res, 200, { object: 'list', data, model: body.model, usage: { prompt_tokens: r.promptTokens, total_tokens: r.promptTokens } });
}

async function handleRerank(req: IncomingMessage, res: ServerResponse, o: EmbeddingHandlerOptions, modelName: string): Promise<void> {
  const body = parseBody(RerankRequestSchema, await readJson(req, o.maxBodyBytes));
  const texts = body.documents.map((d) => (typeof d === 'string' ? d : d.text));
  const r = await clientError(o.context.rerank(body.query, texts, { signal: o.signal, ...(body.top_n != null ? { topN: body.top_n } : {}) }));
  const results = r.results.map((x) => ({
    index: x.index,
    relevance_score: x.score,
    ...(body.return_documents ? { document: { text: texts[x.index]! } } : {}),
  }));
  sendJson(res, 200, { object: 'list', model: body.model ?? modelName, results, usage: { prompt_tokens: r.promptTokens, total_tokens: r.promptTokens } });
}

/** Answers one of {@link EMBEDDING_PATHS} (POST only; the caller checked the method). */
export function handleEmbeddingEndpoint(path: string, req: IncomingMessage, res: ServerResponse, o: EmbeddingHandlerOptions, modelName: string): Promise<void> {
  return path.endsWith('/embeddings') ? handleEmbeddings(req, res, o) : handleRerank(req, res, o, modelName);
}
