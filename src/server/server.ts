// createServer(): an OpenAI- and Anthropic-compatible HTTP server on one model and context.
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename } from 'node:path';
import { z } from 'zod';
import type { Context } from '../engine/context.js';
import { MarkerOptionSchema, type MarkerOption } from '../engine/markers.js';
import { Model } from '../model/model.js';
import { loadModel } from '../model/load.js';
import type { ModelPool, ModelPoolEntry, ModelPoolOptions } from '../model/pool.js';
import { LlamuxError } from '../errors.js';
import { parseOptions, rpcEndpoint, SpeculativeOptionsSchema, type SpeculativeOptions } from '../options.js';
import { handleChatCompletions, type HandlerOptions } from './openai.js';
import { handleEmbeddingEndpoint, isEmbeddingPath } from './embeddings.js';
import { handleCountTokens, handleMessages } from './anthropic.js';
import { handleCompletions, handleDetokenize, handleTokenize } from './completions.js';
import { HttpError, ServerClosingError, parseBody, readJson, sendError, sendJson, shutdownError, toHttpError, type ApiFlavor } from './http.js';
import { LoraField, ServerAdapters, ServerLoraSchema, type ServerLora } from './lora.js';
import { ServerMetrics } from './metrics.js';
import type { PromptPool } from './prompt-pool.js';
import type { ServerLog } from './service.js';
import type { ToolCallStore, ToolCallStoreLimits } from './store.js';
import { ResponseStore, type ResponseStoreLimits } from './response-store.js';
import { handleResponsesEndpoint, isResponsesPath, responsesEndpoint } from './responses.js';
import { handleInfill } from './infill.js';
import { createModelService, serviceContextOptions, type ModelService } from './model-service.js';
import { createPoolRouter, singleModelRouter, type ModelRouter } from './router.js';

export interface ServerOptions {
  /** A loaded model (the server does not dispose it). Give this, `modelPath` or `models`. */
  model?: Model;
  /** A GGUF file to load (the server owns and disposes it). */
  modelPath?: string;
  /**
   * Router mode: several models, each request's `model` picks one (loaded on demand): a folder
   * of GGUF files (named by file stem), a JSON config file, or a config object (name →
   * `{ path, pinned, contextOptions, loadOptions, chatTemplate }`); see ModelPool.
   */
  models?: string | Record<string, ModelPoolEntry>;
  /** Router mode: models loaded at once; the least recently used idle one unloads for another (default 4; 0: no limit). */
  modelsMax?: number;
  /** Router mode: an unpinned model unused this long unloads (default: never). */
  sleepIdleSeconds?: number;
  /** Router mode: the memory the fit planner fits the loaded models in (ModelPoolOptions.memory; default 'auto'). */
  modelsMemory?: ModelPoolOptions['memory'];
  /** Default '127.0.0.1'. */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /** Context size in tokens (KV cells shared by all sequences; default 8192). */
  ctx?: number;
  /** Sequences decoded in parallel (default 4). */
  parallel?: number;
  /** CPU threads for decoding (default: all hardware threads). */
  threads?: number;
  /** Tokens per llama_batch (default 512): also the most tokens of one embedding batch and one input. */
  batchSize?: number;
  /** Tool-call markers: 'auto' (default), a preset, explicit markers, or false. */
  markers?: MarkerOption;
  /**
   * When set, every request but /health needs `Authorization: Bearer KEY` or `x-api-key: KEY`.
   * Several keys: any of them (with `isolateTenants`, each key is a tenant).
   */
  apiKey?: string | string[];
  /**
   * Host header values accepted besides the loopback names (`localhost`, `127.0.0.1`, `[::1]`,
   * with or without the port) and the listen address; `'*'` accepts any (no DNS-rebinding check).
   */
  allowedHosts?: string[];
  /**
   * Tenants (API keys when there are several, else the `x-llamux-tenant` header) never share
   * conversations, tool-call replay or cache numbers.
   */
  isolateTenants?: boolean;
  /** Time to receive a request's headers (default 10 000 ms). */
  headersTimeoutMs?: number;
  /** Time to receive a whole request, body included (default 60 000 ms). */
  requestTimeoutMs?: number;
  /** Idle keep-alive connections close after this (default 5 000 ms). */
  keepAliveTimeoutMs?: number;
  /** Open connections at most; more are closed at once (default 512). */
  maxConnections?: number;
  /** A streaming client that reads nothing for this long is disconnected (default 60 000 ms). */
  sendTimeoutMs?: number;
  /** Requests waiting for a sequence before new ones get 503 (default 1024). */
  maxQueued?: number;
  /** Idle conversations release their sequence after this (default 600 000 ms). */
  sessionTtlMs?: number;
  /** Largest total of message and tool text (UTF-8 bytes) one request may carry (default 1 MiB). */
  maxPromptBytes?: number;
  /**
   * A prompt longer than a sequence of the context: 'error' (default) answers 400
   * (context_length); 'truncate-middle' drops tokens from its middle, keeping the start and the
   * latest turn and room for the answer, and reports the count (`usage.truncated_tokens`,
   * `x-llamux-truncated-tokens`).
   */
  overflow?: 'error' | 'truncate-middle';
  /**
   * A generation that fills its sequence keeps the first `n_keep` tokens of the request (0 by
   * default; BOS besides), drops the oldest half of the rest and goes on, instead of ending with
   * `finish_reason: length` (llama-server's --context-shift). Models whose memory cannot shift
   * (recurrent, hybrid) recompute the kept window instead. Default false.
   */
  contextShift?: boolean;
  /**
   * Keep the assistant turns the server generated exactly as generated in later prompts, even
   * after a new user message where the chat template drops earlier reasoning (Qwen3, Qwen3.5,
   * DeepSeek): a departure from the template that lets the prompt reuse the conversation's KV.
   * Requests may override it (`keep_reasoning`, or the `x-llamux-keep-reasoning` header). Default false.
   */
  keepReasoning?: boolean;
  /** Rendering and tokenizing one request longer than this is stopped with 413 (default 10 000 ms). */
  tokenizeTimeoutMs?: number;
  /** Worker threads that render and tokenize prompts (default 2). */
  tokenizeWorkers?: number;
  /** The server's own log (abort and store warnings); default: stderr. */
  log?: ServerLog;
  /** RAM tier of saved sequence states in MiB (the engine's default when absent; 0 disables it). */
  cacheRamMb?: number;
  /** Disk tier folder of saved sequence states (survives restarts); off when absent. */
  cacheDir?: string;
  /**
   * How long an Anthropic `cache_control` breakpoint's prefix is retained in the RAM and disk
   * tiers, per ttl (default 5 and 60 minutes: Anthropic's).
   */
  promptCacheTtlMs?: { '5m'?: number; '1h'?: number };
  /** The context's deterministic mode (ContextOptions.deterministic, issue 26). */
  deterministic?: boolean;
  /**
   * Speculative decoding (ContextOptions.speculative, issue 27): 'ngram', 'draft' (with
   * `draftModelPath`), 'mtp' (the model's own multi-token-prediction block: a model the server
   * loads gets `{ mtp: true }`) or the context's options; requests opt out with `"speculative": false`.
   */
  speculative?: false | 'ngram' | 'draft' | 'mtp' | SpeculativeOptions;
  /** The draft model for `speculative: 'draft'` (same vocabulary), loaded and owned by the server. */
  draftModelPath?: string;
  /** SQLite file of the tool-call store (default: in memory, lost on close). */
  storePath?: string;
  /** Bounds of the tool-call store. */
  storeLimits?: ToolCallStoreLimits;
  /** Bounds of the stored responses (/v1/responses), kept in the same file as the tool-call store. */
  responseStoreLimits?: ResponseStoreLimits;
  /** Largest accepted request body (default 4 MiB). */
  maxBodyBytes?: number;
  /** A Jinja chat template that replaces the model's own. */
  chatTemplate?: string;
  /** The name /v1/models lists (default: the GGUF's general.name, else the file name). */
  modelName?: string;
  /** Model loading progress (0..1), when the server loads `modelPath` (router mode: any model). */
  onProgress?: (progress: number) => void;
  /** `host:port` of `llamux rpc-server` processes that hold the layers of `modelPath`
   * (see loadModel's `rpcServers`). */
  rpcServers?: string[];
  /**
   * LoRA adapters of the model (`--lora`, `--lora-scaled`): paths, or `{ path, scale }`. Requests
   * use all of them at these scales unless their `lora` field says otherwise; GET /lora-adapters
   * lists them and POST /lora-adapters changes the scales.
   */
  lora?: ServerLora[];
  /** A multimodal projector (`mmproj-*.gguf`) for `modelPath` (loadModel's `projector`): user
   * messages may then hold images (OpenAI `image_url` data: URLs, Anthropic base64 `image` blocks). */
  projector?: string;
  /**
   * `--allow-remote-media`: `http(s)` image URLs in requests are fetched by the server (within
   * `remoteMediaTimeoutMs`, at most the model's `mediaLimits.maxBytes`, 3 redirects, `image/*`
   * only). Default false: such URLs are refused with a 400 and the server fetches nothing.
   */
  allowRemoteMedia?: boolean;
  /** Time for fetching one remote image, redirects and body included (default 10 000 ms). */
  remoteMediaTimeoutMs?: number;
}

const ServerOptionsSchema = z
  .object({
    model: z.custom<Model>((v) => v instanceof Model, { message: 'expected a Model' }).optional(),
    modelPath: z.string().min(1).optional(),
    models: z.union([z.string().min(1), z.record(z.string(), z.custom<ModelPoolEntry>((v) => typeof v === 'object' && v !== null, { message: 'expected a model entry' }))]).optional(),
    modelsMax: z.number().int().min(0).optional(),
    sleepIdleSeconds: z.number().positive().optional(),
    modelsMemory: z.custom<ModelPoolOptions['memory']>((v) => v === 'auto' || v === false || (typeof v === 'object' && v !== null), { message: "expected 'auto', false or { devices }" }).optional(),
    host: z.string().min(1).default('127.0.0.1'),
    port: z.number().int().min(0).max(65535).default(8080),
    ctx: z.number().int().min(64).default(8192),
    parallel: z.number().int().min(1).max(256).default(4),
    threads: z.number().int().positive().optional(),
    batchSize: z.number().int().positive().optional(),
    markers: MarkerOptionSchema.default('auto'),
    apiKey: z.union([z.string().min(1, 'an API key must not be empty'), z.array(z.string().min(1, 'an API key must not be empty')).min(1)]).optional(),
    allowedHosts: z.array(z.string().min(1)).default([]),
    isolateTenants: z.boolean().default(false),
    speculative: z.union([z.literal(false), z.literal('ngram'), z.literal('draft'), z.literal('mtp'), SpeculativeOptionsSchema]).optional(),
    draftModelPath: z.string().min(1).optional(),
    headersTimeoutMs: z.number().int().positive().default(10_000),
    requestTimeoutMs: z.number().int().positive().default(60_000),
    keepAliveTimeoutMs: z.number().int().positive().default(5_000),
    maxConnections: z.number().int().positive().default(512),
    sendTimeoutMs: z.number().int().positive().default(60_000),
    maxQueued: z.number().int().min(0).optional(),
    sessionTtlMs: z.number().int().positive().optional(),
    maxPromptBytes: z.number().int().positive().default(1024 * 1024),
    overflow: z.enum(['error', 'truncate-middle']).default('error'),
    contextShift: z.boolean().default(false),
    keepReasoning: z.boolean().default(false),
    tokenizeTimeoutMs: z.number().int().positive().default(10_000),
    tokenizeWorkers: z.number().int().min(1).max(64).default(2),
    log: z.custom<ServerLog>((v) => typeof v === 'function', { message: 'expected a function' }).optional(),
    cacheRamMb: z.number().int().min(0).optional(),
    cacheDir: z.string().min(1).optional(),
    promptCacheTtlMs: z.object({ '5m': z.number().int().min(1).max(2 ** 31 - 1).optional(), '1h': z.number().int().min(1).max(2 ** 31 - 1).optional() }).strict().optional(),
    deterministic: z.boolean().optional(),
    storePath: z.string().min(1).optional(),
    storeLimits: z
      .object({ maxRows: z.number().int().positive().optional(), maxBytes: z.number().int().positive().optional(), maxAgeMs: z.number().int().positive().optional() })
      .strict()
      .optional(),
    responseStoreLimits: z
      .object({ maxRows: z.number().int().positive().optional(), maxBytes: z.number().int().positive().optional(), maxAgeMs: z.number().int().positive().optional() })
      .strict()
      .optional(),
    maxBodyBytes: z.number().int().positive().default(4 * 1024 * 1024),
    chatTemplate: z.string().min(1).optional(),
    modelName: z.string().min(1).optional(),
    onProgress: z.custom<(p: number) => void>((v) => typeof v === 'function', { message: 'expected a function' }).optional(),
    rpcServers: z.array(rpcEndpoint).min(1).max(16).optional(),
    lora: z.array(ServerLoraSchema).max(64).optional(),
    projector: z.string().min(1).optional(),
    allowRemoteMedia: z.boolean().default(false),
    remoteMediaTimeoutMs: z.number().int().positive().default(10_000),
  })
  .strict()
  .refine((o) => [o.model, o.modelPath, o.models].filter((v) => v !== undefined).length === 1, { message: 'give exactly one of "model", "modelPath" and "models"' })
  .refine((o) => o.models !== undefined || (o.modelsMax === undefined && o.sleepIdleSeconds === undefined && o.modelsMemory === undefined), {
    message: '"modelsMax", "sleepIdleSeconds" and "modelsMemory" apply to router mode ("models")',
  })
  .refine((o) => o.models === undefined || (o.modelName === undefined && o.draftModelPath === undefined && o.speculative !== 'draft' && o.lora === undefined && o.projector === undefined), {
    message: 'router mode ("models") takes no "modelName" (models are named by the folder or config), no draft model, no "lora" and no "projector" (they belong to one model: use its loadOptions in the config)',
  });
type ParsedServerOptions = z.output<typeof ServerOptionsSchema>;

export interface LlamuxServer {
  /** e.g. 'http://127.0.0.1:8080' */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** The model (router mode has none: reading it throws UNSUPPORTED; see `pool`). */
  readonly model: Model;
  /** The context (router mode: throws UNSUPPORTED). */
  readonly context: Context;
  readonly metrics: ServerMetrics;
  /** The tool-call store (router mode: throws UNSUPPORTED; each model has its own). */
  readonly store: ToolCallStore;
  /** Router mode: the models, their states, loads and unloads. */
  readonly pool?: ModelPool<unknown>;
  /** Stored responses of /v1/responses (in `storePath`'s file, or in memory). */
  readonly responses: ResponseStore;
  /** @internal The prompt workers (their stop latencies and counters). */
  readonly prompts: PromptPool;
  /** Stops listening, ends running requests, frees the context (and the model when the server loaded it). Idempotent. */
  close(): Promise<void>;
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** The index of the key the request carries, or -1. */
function matchKey(req: IncomingMessage, keyDigests: readonly Buffer[]): number {
  const auth = req.headers.authorization;
  const bearer = typeof auth === 'string' && /^bearer\s+/i.test(auth) ? auth.replace(/^bearer\s+/i, '').trim() : undefined;
  const xKey = typeof req.headers['x-api-key'] === 'string' ? req.headers['x-api-key'] : undefined;
  let found = -1;
  for (const candidate of [bearer, xKey]) {
    if (candidate === undefined) continue;
    const d = digest(candidate);
    // Compare with every key, so the time taken does not say which one matched.
    keyDigests.forEach((k, i) => {
      if (timingSafeEqual(d, k) && found < 0) found = i;
    });
  }
  return found;
}

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];
const TENANT_RE = /^[A-Za-z0-9._:-]{1,64}$/;

/** Host header values the server accepts (lower case), or undefined for any. */
function hostAllowList(allowed: readonly string[], listenHost: string, port: number): Set<string> | undefined {
  if (allowed.includes('*')) return undefined;
  const names = new Set<string>();
  const listen = listenHost.includes(':') && !listenHost.startsWith('[') ? `[${listenHost}]` : listenHost;
  const wildcard = listen === '0.0.0.0' || listen === '[::]';
  for (const n of [...LOOPBACK_NAMES, ...(wildcard ? [] : [listen]), ...allowed]) {
    const name = n.toLowerCase();
    names.add(name);
    if (!/:\d+$/.test(name)) names.add(`${name}:${port}`);
  }
  return names;
}

/** The model, context and service of a single-model server. */
interface SingleModel {
  readonly model: Model;
  readonly context: Context;
  readonly built: ModelService;
  readonly name: string;
  close(): Promise<void>;
}

/** The speculative options of the server's `speculative` (a draft model given apart). */
function speculativeOf(o: ParsedServerOptions, draftModel?: Model): SpeculativeOptions | undefined {
  return o.speculative === 'draft'
    ? { mode: 'draft', model: draftModel! }
    : o.speculative === 'ngram' || o.speculative === 'mtp'
      ? { mode: o.speculative }
      : o.speculative || undefined;
}

/** Loads (or takes) the one model of a single-model server and builds its context and service. */
async function openSingleModel(o: ParsedServerOptions, shared: { metrics: ServerMetrics; log: ServerLog }): Promise<SingleModel> {
  const owned = o.model === undefined;
  const model = o.model ?? (await loadModel(o.modelPath!, {
    ...(o.onProgress ? { onProgress: o.onProgress } : {}),
    ...(o.rpcServers ? { rpcServers: o.rpcServers } : {}),
    ...(o.projector ? { projector: o.projector } : {}),
    fit: { contextSize: o.ctx, sequences: o.parallel },
    ...(o.speculative === 'mtp' || (typeof o.speculative === 'object' && o.speculative.mode === 'mtp') ? { mtp: true } : {}),
  }));
  let context: Context | undefined;
  let draftModel: Model | undefined;
  try {
    if ((o.speculative === 'draft') !== (o.draftModelPath !== undefined)) {
      throw new LlamuxError('INVALID_ARGUMENT', "speculative 'draft' needs draftModelPath, and draftModelPath needs speculative 'draft'");
    }
    if (o.draftModelPath !== undefined) draftModel = await loadModel(o.draftModelPath);
    context = await model.createContext({
      // gpuLayers 'auto' may shrink the context (not below 4096) to keep every layer on the GPU.
      contextSize: owned ? (model.fit?.contextSize ?? o.ctx) : o.ctx,
      ...serviceContextOptions(o, speculativeOf(o, draftModel)),
    });
    const built = await createModelService(model, context, o, shared);
    const ctx = context;
    const draft = draftModel;
    return {
      model,
      context: ctx,
      built,
      name: o.modelName ?? model.metadata.name ?? basename(model.path).replace(/\.gguf$/i, ''),
      async close() {
        await built.close();
        await ctx.dispose();
        if (owned) await model.dispose();
        await draft?.dispose();
      },
    };
  } catch (e) {
    await context?.dispose();
    if (owned) await model.dispose();
    await draftModel?.dispose();
    throw e;
  }
}

/** What a router-mode server has no single one of. */
function routerHasNo(what: string): never {
  throw new LlamuxError('UNSUPPORTED', `A server in router mode ("models") has no single ${what}: use server.pool`);
}

/**
 * Starts an OpenAI- and Anthropic-compatible server.
 *
 * Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions`,
 * `POST /tokenize`, `POST /detokenize`, `POST /v1/messages`, `POST /v1/messages/count_tokens`,
 * `POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`,
 * `POST /v1/embeddings`, `POST /v1/rerank`, `GET /metrics`; router mode (`models`) also
 * `GET /models`, `POST /models/load`, `POST /models/unload`.
 *
 * @throws LlamuxError INVALID_ARGUMENT (options), MODEL_NOT_FOUND / MODEL_INVALID (modelPath),
 *   CONTEXT_CREATE_FAILED; a listen error (EADDRINUSE, ...) rejects as is
 * @example
 * const server = await createServer({ modelPath: 'model.gguf', port: 0 });
 * const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
 */
export async function createServer(options: ServerOptions): Promise<LlamuxServer> {
  const o = parseOptions(ServerOptionsSchema, options, 'server options');
  const metrics = new ServerMetrics();
  const log: ServerLog = o.log ?? ((level, message) => process.stderr.write(`llamux ${level}: ${message}\n`));
  const started = Math.floor(Date.now() / 1000);
  let single: SingleModel | undefined;
  let router: ModelRouter | undefined;
  // One store of responses per server (router mode: a chain may name any model).
  let responses: ResponseStore | undefined;
  try {
    responses = new ResponseStore(o.storePath ?? ':memory:', o.responseStoreLimits ?? {});
    if (o.models !== undefined) {
      router = await createPoolRouter({ ...o, models: o.models, speculative: speculativeOf(o) }, { metrics, log }, started);
    } else {
      single = await openSingleModel(o, { metrics, log });
      router = singleModelRouter(single.name, single.model, single.context, single.built.service, started);
    }
    const models = router;
    const keys = o.apiKey === undefined ? [] : Array.isArray(o.apiKey) ? o.apiKey : [o.apiKey];
    const keyDigests = keys.map(digest);
    // A tenant named by a key is a digest of it: stable across restarts (the store keeps it), never the key itself.
    const keyTenants = keys.map((k) => `key-${createHash('sha256').update(`llamux-tenant:${k}`).digest('hex').slice(0, 16)}`);
    let allowedHosts: Set<string> | undefined;
    const controllers = new Set<AbortController>();
    let closingServer = false;

    const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
      const path = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '') || '/';
      const anthropicClient = typeof req.headers['anthropic-version'] === 'string';
      const api: ApiFlavor = path.startsWith('/v1/messages') || (anthropicClient && path.startsWith('/v1/models')) ? 'anthropic' : 'openai';
      const endpoint = ['/health', '/metrics', '/v1/models', '/v1/chat/completions', '/v1/completions', '/infill', '/tokenize', '/detokenize', '/v1/messages', '/v1/messages/count_tokens', '/models', '/models/load', '/models/unload'].includes(path) || isEmbeddingPath(path)
        ? path
        : path.startsWith('/v1/models/')
          ? '/v1/models/{id}'
          : isResponsesPath(path)
            ? responsesEndpoint(path)
            : 'other';
      // Counted once the response is done or the connection is gone: 499 when the client left first.
      res.once('close', () => metrics.requests.inc({ endpoint, status: res.writableFinished ? String(res.statusCode) : '499' }));
      const method = req.method ?? 'GET';
      const allow = (m: string): void => {
        if (method !== m) throw new HttpError(405, 'invalid_request', `${path} accepts ${m} requests only`);
      };
      try {
        // DNS rebinding: a web page whose name now resolves to this machine sends its own name.
        const host = (req.headers.host ?? '').toLowerCase();
        if (allowedHosts && !allowedHosts.has(host)) {
          req.resume();
          throw new HttpError(403, 'forbidden', `The Host header ${JSON.stringify(host.slice(0, 100))} is not allowed; start the server with --allowed-host ${host.replace(/:\d+$/, '') || 'NAME'} to accept it`);
        }
        if (path === '/health') {
          allow('GET');
          const h = models.health();
          sendJson(res, h.status, h.body);
          return;
        }
        const keyIndex = keyDigests.length ? matchKey(req, keyDigests) : -1;
        if (keyDigests.length && keyIndex < 0) {
          req.resume();
          throw new HttpError(401, 'authentication', 'Invalid or missing API key: send it as "Authorization: Bearer KEY" or "x-api-key: KEY"');
        }
        let tenant: string | undefined;
        if (o.isolateTenants) {
          if (keys.length > 1) tenant = keyTenants[keyIndex];
          else {
            const h = req.headers['x-llamux-tenant'];
            const v = Array.isArray(h) ? h[0] : h;
            if (v === undefined || !TENANT_RE.test(v)) {
              req.resume();
              throw new HttpError(400, 'invalid_request', 'This server isolates tenants: send an x-llamux-tenant header of 1 to 64 characters of A-Z, a-z, 0-9, ".", "_", ":" or "-"');
            }
            tenant = `hdr-${v}`;
          }
        }
        if (path === '/metrics') {
          allow('GET');
          const text = metrics.render(models.cacheStats());
          res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8', 'content-length': String(Buffer.byteLength(text)) });
          res.end(text);
          return;
        }
        if (path === '/v1/models') {
          allow('GET');
          sendJson(res, 200, models.list(anthropicClient));
          return;
        }
        if (path === '/lora-adapters') {
          // router mode: each model's adapters are its own (not listed here)
          const adapters = single?.built.adapters ?? ServerAdapters.none();
          if (method === 'POST') adapters.setScales(parseBody(LoraField, await readJson(req, o.maxBodyBytes)));
          else allow('GET');
          sendJson(res, 200, adapters.list());
          return;
        }
        if (path.startsWith('/v1/models/')) {
          allow('GET');
          let id: string;
          try {
            id = decodeURIComponent(path.slice('/v1/models/'.length));
          } catch {
            throw new HttpError(400, 'invalid_request', 'The model id in the path is not valid percent-encoding');
          }
          sendJson(res, 200, models.entry(id, anthropicClient));
          return;
        }
        if (await models.admin(path, method, req, res, o.maxBodyBytes)) return;
        const responsesApi = isResponsesPath(path);
        const chat = ['/v1/chat/completions', '/v1/completions', '/infill', '/tokenize', '/detokenize', '/v1/messages', '/v1/messages/count_tokens'].includes(path) || isEmbeddingPath(path) || responsesApi;
        if (!chat) throw new HttpError(404, 'not_found', `There is no endpoint ${method} ${path}`);
        if (!responsesApi) allow('POST');
        const ac = new AbortController();
        controllers.add(ac);
        res.on('close', () => {
          if (!res.writableFinished) {
            // One line per abort, whichever layer noticed it first.
            if (!closingServer) log('info', `${method} ${path}: the client closed the connection before the response ended; its generation was cancelled`);
            ac.abort(new Error('The client closed the connection'));
          }
          controllers.delete(ac);
        });
        const ho: HandlerOptions = {
          maxBodyBytes: o.maxBodyBytes,
          signal: ac.signal,
          sendTimeoutMs: o.sendTimeoutMs,
          ...(tenant !== undefined ? { tenant } : {}),
          ...(o.allowRemoteMedia ? { remoteMediaTimeoutMs: o.remoteMediaTimeoutMs } : {}),
        };
        const ro = { ...ho, store: responses!, log };
        // Reading, listing or deleting a stored response needs no model.
        if (responsesApi && method !== 'POST') {
          await handleResponsesEndpoint(path, method, req, res, null, ro);
          return;
        }
        // The request's model (router mode: its `model`, loaded if needed), held until its response ends.
        const target = await models.target(req, o.maxBodyBytes, ac.signal);
        const { service, context, name } = target;
        try {
          if (responsesApi) await handleResponsesEndpoint(path, method, req, res, service, ro);
          else if (isEmbeddingPath(path)) await handleEmbeddingEndpoint(path, req, res, { context, maxBodyBytes: o.maxBodyBytes, signal: ac.signal }, name);
          else if (path === '/v1/messages/count_tokens') await handleCountTokens(req, res, service, ho);
          else if (path === '/v1/chat/completions') await handleChatCompletions(req, res, service, ho);
          else if (path === '/v1/completions') await handleCompletions(req, res, service, { ...ho, maxPromptBytes: o.maxPromptBytes });
          else if (path === '/tokenize') await handleTokenize(req, res, service, { ...ho, maxPromptBytes: o.maxPromptBytes });
          else if (path === '/detokenize') await handleDetokenize(req, res, service, ho);
          else if (path === '/infill') await handleInfill(req, res, service, { ...ho, maxPromptBytes: o.maxPromptBytes });
          else await handleMessages(req, res, service, ho);
        } finally {
          target.release();
        }
      } catch (e) {
        // The client is gone: the close handler logged it once; nothing more to say or send.
        if (res.destroyed || (res.writableEnded && !res.writableFinished)) return;
        const err = closingServer && !res.headersSent ? shutdownError() : toHttpError(e);
        const headers: Record<string, string> = err.status === 413 ? { connection: 'close' } : {};
        if (!res.headersSent) sendError(res, api, err, headers);
        else res.end();
      }
    };

    const http = createHttpServer(
      {
        headersTimeout: o.headersTimeoutMs,
        requestTimeout: Math.max(o.requestTimeoutMs, o.headersTimeoutMs),
        keepAliveTimeout: o.keepAliveTimeoutMs,
        // How often Node checks the two timeouts above (its default, 30 s, would stretch them).
        connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(Math.min(o.headersTimeoutMs, o.requestTimeoutMs) / 4))),
      },
      (req, res) => {
        void handle(req, res);
      },
    );
    http.maxConnections = o.maxConnections;
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(o.port, o.host, () => {
        http.off('error', reject);
        resolve();
      });
    });
    const addr = http.address() as AddressInfo;
    allowedHosts = hostAllowList(o.allowedHosts, o.host, addr.port);
    const hostForUrl = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
    let closing: Promise<void> | undefined;
    const one = single;
    const rs = responses;
    return {
      url: `http://${hostForUrl}:${addr.port}`,
      host: addr.address,
      port: addr.port,
      get model() {
        return one?.model ?? routerHasNo('model');
      },
      get context() {
        return one?.context ?? routerHasNo('context');
      },
      metrics,
      get store() {
        return one?.built.store ?? routerHasNo('tool-call store');
      },
      get prompts() {
        return one?.built.prompts ?? routerHasNo('prompt pool');
      },
      ...(models.pool ? { pool: models.pool as ModelPool<unknown> } : {}),
      responses: rs,
      close(): Promise<void> {
        closing ??= (async () => {
          closingServer = true;
          const done = new Promise<void>((resolve) => http.close(() => resolve()));
          for (const ac of controllers) ac.abort(new ServerClosingError());
          http.closeIdleConnections();
          setTimeout(() => http.closeAllConnections(), 1000).unref();
          await done;
          await models.close();
          await one?.close();
          rs.close();
        })();
        return closing;
      },
    };
  } catch (e) {
    await router?.close();
    await single?.close();
    responses?.close();
    throw e;
  }
}
