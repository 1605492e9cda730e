// createServer(): an OpenAI- and Anthropic-compatible HTTP server on one model and context.
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename } from 'node:path';
import { z } from 'zod';
import { markerTexts } from '../chat/prompt.js';
import { ChatTemplate } from '../chat/template.js';
import type { Context } from '../engine/context.js';
import { MarkerOptionSchema, type MarkerOption } from '../engine/markers.js';
import { Model } from '../model/model.js';
import { loadModel } from '../model/load.js';
import { LlamuxError } from '../errors.js';
import { parseOptions, rpcEndpoint, SpeculativeOptionsSchema, type SpeculativeOptions } from '../options.js';
import { handleChatCompletions, type HandlerOptions } from './openai.js';
import { handleEmbeddingEndpoint, isEmbeddingPath } from './embeddings.js';
import { handleCountTokens, handleMessages } from './anthropic.js';
import { handleCompletions, handleDetokenize, handleTokenize } from './completions.js';
import { HttpError, ServerClosingError, sendError, sendJson, shutdownError, toHttpError, type ApiFlavor } from './http.js';
import { ServerMetrics } from './metrics.js';
import { PromptPool } from './prompt-pool.js';
import { ChatService, type ServerLog } from './service.js';
import { configurePromptCache, DEFAULT_TTLS } from './cache-breakpoints.js';
import { ToolCallStore, type ToolCallStoreLimits } from './store.js';
import { handleInfill } from './infill.js';

export interface ServerOptions {
  /** A loaded model (the server does not dispose it). Give this or `modelPath`. */
  model?: Model;
  /** A GGUF file to load (the server owns and disposes it). */
  modelPath?: string;
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
  /** Largest accepted request body (default 4 MiB). */
  maxBodyBytes?: number;
  /** A Jinja chat template that replaces the model's own. */
  chatTemplate?: string;
  /** The name /v1/models lists (default: the GGUF's general.name, else the file name). */
  modelName?: string;
  /** Model loading progress (0..1), when the server loads `modelPath`. */
  onProgress?: (progress: number) => void;
  /** `host:port` of `llamux rpc-server` processes that hold the layers of `modelPath`
   * (see loadModel's `rpcServers`). */
  rpcServers?: string[];
}

const ServerOptionsSchema = z
  .object({
    model: z.custom<Model>((v) => v instanceof Model, { message: 'expected a Model' }).optional(),
    modelPath: z.string().min(1).optional(),
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
    maxBodyBytes: z.number().int().positive().default(4 * 1024 * 1024),
    chatTemplate: z.string().min(1).optional(),
    modelName: z.string().min(1).optional(),
    onProgress: z.custom<(p: number) => void>((v) => typeof v === 'function', { message: 'expected a function' }).optional(),
    rpcServers: z.array(rpcEndpoint).min(1).max(16).optional(),
  })
  .strict()
  .refine((o) => (o.model === undefined) !== (o.modelPath === undefined), { message: 'give exactly one of "model" and "modelPath"' });

export interface LlamuxServer {
  /** e.g. 'http://127.0.0.1:8080' */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  readonly model: Model;
  readonly context: Context;
  readonly metrics: ServerMetrics;
  readonly store: ToolCallStore;
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

/**
 * Starts an OpenAI- and Anthropic-compatible server.
 *
 * Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions`,
 * `POST /tokenize`, `POST /detokenize`, `POST /v1/messages`, `POST /v1/messages/count_tokens`,
 * `POST /v1/embeddings`, `POST /v1/rerank`, `GET /metrics`.
 *
 * @throws LlamuxError INVALID_ARGUMENT (options), MODEL_NOT_FOUND / MODEL_INVALID (modelPath),
 *   CONTEXT_CREATE_FAILED; a listen error (EADDRINUSE, ...) rejects as is
 * @example
 * const server = await createServer({ modelPath: 'model.gguf', port: 0 });
 * const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
 */
export async function createServer(options: ServerOptions): Promise<LlamuxServer> {
  const o = parseOptions(ServerOptionsSchema, options, 'server options');
  const owned = o.model === undefined;
  const model = o.model ?? (await loadModel(o.modelPath!, {
    ...(o.onProgress ? { onProgress: o.onProgress } : {}),
    ...(o.rpcServers ? { rpcServers: o.rpcServers } : {}),
    fit: { contextSize: o.ctx, sequences: o.parallel },
    ...(o.speculative === 'mtp' || (typeof o.speculative === 'object' && o.speculative.mode === 'mtp') ? { mtp: true } : {}),
  }));
  let context: Context | undefined;
  let store: ToolCallStore | undefined;
  let prompts: PromptPool | undefined;
  let draftModel: Model | undefined;
  try {
    if ((o.speculative === 'draft') !== (o.draftModelPath !== undefined)) {
      throw new LlamuxError('INVALID_ARGUMENT', "speculative 'draft' needs draftModelPath, and draftModelPath needs speculative 'draft'");
    }
    if (o.draftModelPath !== undefined) draftModel = await loadModel(o.draftModelPath);
    const speculative: SpeculativeOptions | undefined =
      o.speculative === 'draft'
        ? { mode: 'draft', model: draftModel! }
        : o.speculative === 'ngram' || o.speculative === 'mtp'
          ? { mode: o.speculative }
          : o.speculative || undefined;
    context = await model.createContext({
      // gpuLayers 'auto' may shrink the context (not below 4096) to keep every layer on the GPU.
      contextSize: owned ? (model.fit?.contextSize ?? o.ctx) : o.ctx,
      sequences: o.parallel,
      toolCallMarkers: o.markers,
      ...(o.maxQueued !== undefined ? { maxQueued: o.maxQueued } : {}),
      ...(o.sessionTtlMs !== undefined ? { sessionTtlMs: o.sessionTtlMs } : {}),
      ...(o.threads !== undefined ? { threads: o.threads, batchThreads: o.threads } : {}),
      ...(o.batchSize !== undefined ? { batchSize: o.batchSize, microBatchSize: o.batchSize } : {}),
      ...(o.cacheRamMb !== undefined ? { cacheRamMb: o.cacheRamMb } : {}),
      ...(o.cacheDir !== undefined ? { cacheDir: o.cacheDir } : {}),
      ...(o.deterministic ? { deterministic: true } : {}),
      ...(speculative ? { speculative } : {}),
    });
    store = new ToolCallStore(o.storePath ?? ':memory:', o.storeLimits ?? {});
    const template = ChatTemplate.fromModel(model, o.chatTemplate);
    const metrics = new ServerMetrics();
    const log: ServerLog = o.log ?? ((level, message) => process.stderr.write(`llamux ${level}: ${message}\n`));
    const markerText = markerTexts(context);
    prompts = new PromptPool({
      modelPath: model.path,
      templateSource: template.source,
      bosToken: template.bosToken,
      eosToken: template.eosToken,
      ...(markerText ? { markers: markerText } : {}),
      size: o.tokenizeWorkers,
      timeoutMs: o.tokenizeTimeoutMs,
      // A prompt must be shorter than a sequence: tokenizing stops once it cannot be (unless
      // it is to be cut in the middle: --max-prompt-bytes bounds it then).
      ...(o.overflow === 'error' ? { maxTokens: context.settings.sequenceContextSize - 1 } : {}),
    });
    await prompts.start();
    const service = new ChatService({ model, context, template, store, metrics, prompts, maxPromptBytes: o.maxPromptBytes, isolateTenants: o.isolateTenants, overflow: o.overflow, contextShift: o.contextShift, log });
    configurePromptCache(service, { ttlMs: { ...DEFAULT_TTLS, ...o.promptCacheTtlMs }, log, isolateTenants: o.isolateTenants ?? false });
    const name = o.modelName ?? model.metadata.name ?? basename(model.path).replace(/\.gguf$/i, '');
    const keys = o.apiKey === undefined ? [] : Array.isArray(o.apiKey) ? o.apiKey : [o.apiKey];
    const keyDigests = keys.map(digest);
    // A tenant named by a key is a digest of it: stable across restarts (the store keeps it), never the key itself.
    const keyTenants = keys.map((k) => `key-${createHash('sha256').update(`llamux-tenant:${k}`).digest('hex').slice(0, 16)}`);
    let allowedHosts: Set<string> | undefined;
    const controllers = new Set<AbortController>();
    let closingServer = false;
    const started = Math.floor(Date.now() / 1000);

    const modelEntry = (anthropic: boolean) =>
      anthropic
        ? { type: 'model', id: name, display_name: name, created_at: new Date(started * 1000).toISOString() }
        : { id: name, object: 'model', created: started, owned_by: 'llamux' };

    const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
      const path = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '') || '/';
      const anthropicClient = typeof req.headers['anthropic-version'] === 'string';
      const api: ApiFlavor = path.startsWith('/v1/messages') || (anthropicClient && path.startsWith('/v1/models')) ? 'anthropic' : 'openai';
      const endpoint = ['/health', '/metrics', '/v1/models', '/v1/chat/completions', '/v1/completions', '/infill', '/tokenize', '/detokenize', '/v1/messages', '/v1/messages/count_tokens'].includes(path) || isEmbeddingPath(path)
        ? path
        : path.startsWith('/v1/models/')
          ? '/v1/models/{id}'
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
          // An RPC server holding the model's layers died: this instance cannot answer any
          // more (a balancer should route elsewhere); restart it once the server is back.
          const failed = model.rpc?.failed;
          if (failed !== undefined) {
            sendJson(res, 503, { status: 'error', model: name, error: { code: 'RPC_UNAVAILABLE', message: failed } });
            return;
          }
          const c = context!.cacheStats();
          sendJson(res, 200, {
            status: 'ok',
            model: name,
            contextSize: context!.settings.contextSize,
            parallel: context!.settings.sequences,
            pendingRequests: context!.pendingRequests,
            sessions: c.sessions,
            cache: { ramBytes: c.ramBytes, ramEntries: c.ramEntries, diskBytes: c.diskBytes, diskEntries: c.diskEntries },
          });
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
          const text = metrics.render(context!.cacheStats());
          res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8', 'content-length': String(Buffer.byteLength(text)) });
          res.end(text);
          return;
        }
        if (path === '/v1/models') {
          allow('GET');
          const entry = modelEntry(anthropicClient);
          sendJson(res, 200, anthropicClient ? { data: [entry], has_more: false, first_id: name, last_id: name } : { object: 'list', data: [entry] });
          return;
        }
        if (path.startsWith('/v1/models/')) {
          allow('GET');
          // Any model name is served by the loaded model.
          let id: string;
          try {
            id = decodeURIComponent(path.slice('/v1/models/'.length));
          } catch {
            throw new HttpError(400, 'invalid_request', 'The model id in the path is not valid percent-encoding');
          }
          sendJson(res, 200, { ...modelEntry(anthropicClient), id });
          return;
        }
        const chat = ['/v1/chat/completions', '/v1/completions', '/infill', '/tokenize', '/detokenize', '/v1/messages', '/v1/messages/count_tokens'].includes(path) || isEmbeddingPath(path);
        if (!chat) throw new HttpError(404, 'not_found', `There is no endpoint ${method} ${path}`);
        allow('POST');
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
        const ho: HandlerOptions = { maxBodyBytes: o.maxBodyBytes, signal: ac.signal, sendTimeoutMs: o.sendTimeoutMs, ...(tenant !== undefined ? { tenant } : {}) };
        if (isEmbeddingPath(path)) await handleEmbeddingEndpoint(path, req, res, { context: context!, maxBodyBytes: o.maxBodyBytes, signal: ac.signal }, name);
        else if (path === '/v1/messages/count_tokens') await handleCountTokens(req, res, service, ho);
        else if (path === '/v1/chat/completions') await handleChatCompletions(req, res, service, ho);
        else if (path === '/v1/completions') await handleCompletions(req, res, service, { ...ho, maxPromptBytes: o.maxPromptBytes });
        else if (path === '/tokenize') await handleTokenize(req, res, service, { ...ho, maxPromptBytes: o.maxPromptBytes });
        else if (path === '/detokenize') await handleDetokenize(req, res, service, ho);
        else if (path === '/infill') await handleInfill(req, res, service, { ...ho, maxPromptBytes: o.maxPromptBytes });
        else await handleMessages(req, res, service, ho);
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
    const ctx = context;
    const st = store;
    const pool = prompts;
    return {
      url: `http://${hostForUrl}:${addr.port}`,
      host: addr.address,
      port: addr.port,
      model,
      context: ctx,
      metrics,
      store: st,
      prompts: pool,
      close(): Promise<void> {
        closing ??= (async () => {
          closingServer = true;
          const done = new Promise<void>((resolve) => http.close(() => resolve()));
          for (const ac of controllers) ac.abort(new ServerClosingError());
          http.closeIdleConnections();
          setTimeout(() => http.closeAllConnections(), 1000).unref();
          await done;
          await pool.close();
          await ctx.dispose();
          st.close();
          if (owned) await model.dispose();
          await draftModel?.dispose();
        })();
        return closing;
      },
    };
  } catch (e) {
    await prompts?.close();
    await context?.dispose();
    store?.close();
    if (owned) await model.dispose();
    await draftModel?.dispose();
    throw e;
  }
}
