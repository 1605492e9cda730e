// createServer(): an OpenAI- and Anthropic-compatible HTTP server on one model and context.
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename } from 'node:path';
import { z } from 'zod';
import { ChatTemplate } from '../chat/template.js';
import type { Context } from '../context.js';
import { MarkerOptionSchema, type MarkerOption } from '../markers.js';
import { Model, loadModel } from '../model.js';
import { parseOptions } from '../options.js';
import { handleChatCompletions } from './openai.js';
import { handleCountTokens, handleMessages } from './anthropic.js';
import { HttpError, sendError, sendJson, toHttpError, type ApiFlavor } from './http.js';
import { ServerMetrics } from './metrics.js';
import { ChatService } from './service.js';
import { ToolCallStore, type ToolCallStoreLimits } from './store.js';

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
  /** Tool-call markers: 'auto' (default), a preset, explicit markers, or false. */
  markers?: MarkerOption;
  /** When set, every request but /health needs `Authorization: Bearer KEY` or `x-api-key: KEY`. */
  apiKey?: string;
  /** RAM tier of saved sequence states in MiB (the engine's default when absent; 0 disables it). */
  cacheRamMb?: number;
  /** Disk tier folder of saved sequence states (survives restarts); off when absent. */
  cacheDir?: string;
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
    markers: MarkerOptionSchema.default('auto'),
    apiKey: z.string().min(1).optional(),
    cacheRamMb: z.number().int().min(0).optional(),
    cacheDir: z.string().min(1).optional(),
    storePath: z.string().min(1).optional(),
    storeLimits: z
      .object({ maxRows: z.number().int().positive().optional(), maxBytes: z.number().int().positive().optional(), maxAgeMs: z.number().int().positive().optional() })
      .strict()
      .optional(),
    maxBodyBytes: z.number().int().positive().default(4 * 1024 * 1024),
    chatTemplate: z.string().min(1).optional(),
    modelName: z.string().min(1).optional(),
    onProgress: z.custom<(p: number) => void>((v) => typeof v === 'function', { message: 'expected a function' }).optional(),
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
  /** Stops listening, ends running requests, frees the context (and the model when the server loaded it). Idempotent. */
  close(): Promise<void>;
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

function authorized(req: IncomingMessage, keyDigest: Buffer): boolean {
  const auth = req.headers.authorization;
  const bearer = typeof auth === 'string' && /^bearer\s+/i.test(auth) ? auth.replace(/^bearer\s+/i, '').trim() : undefined;
  const xKey = typeof req.headers['x-api-key'] === 'string' ? req.headers['x-api-key'] : undefined;
  for (const candidate of [bearer, xKey]) {
    if (candidate !== undefined && timingSafeEqual(digest(candidate), keyDigest)) return true;
  }
  return false;
}

/**
 * Starts an OpenAI- and Anthropic-compatible server.
 *
 * Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/messages`,
 * `POST /v1/messages/count_tokens`, `GET /metrics`.
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
  const model = o.model ?? (await loadModel(o.modelPath!, o.onProgress ? { onProgress: o.onProgress } : {}));
  let context: Context | undefined;
  let store: ToolCallStore | undefined;
  try {
    context = await model.createContext({
      contextSize: o.ctx,
      sequences: o.parallel,
      toolCallMarkers: o.markers,
      ...(o.threads !== undefined ? { threads: o.threads, batchThreads: o.threads } : {}),
      ...(o.cacheRamMb !== undefined ? { cacheRamMb: o.cacheRamMb } : {}),
      ...(o.cacheDir !== undefined ? { cacheDir: o.cacheDir } : {}),
    });
    store = new ToolCallStore(o.storePath ?? ':memory:', o.storeLimits ?? {});
    const template = ChatTemplate.fromModel(model, o.chatTemplate);
    const metrics = new ServerMetrics();
    const service = new ChatService({ model, context, template, store, metrics });
    const name = o.modelName ?? model.metadata.name ?? basename(model.path).replace(/\.gguf$/i, '');
    const keyDigest = o.apiKey !== undefined ? digest(o.apiKey) : undefined;
    const controllers = new Set<AbortController>();
    const started = Math.floor(Date.now() / 1000);

    const modelEntry = (anthropic: boolean) =>
      anthropic
        ? { type: 'model', id: name, display_name: name, created_at: new Date(started * 1000).toISOString() }
        : { id: name, object: 'model', created: started, owned_by: 'llamux' };

    const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
      const path = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '') || '/';
      const anthropicClient = typeof req.headers['anthropic-version'] === 'string';
      const api: ApiFlavor = path.startsWith('/v1/messages') || (anthropicClient && path.startsWith('/v1/models')) ? 'anthropic' : 'openai';
      const endpoint = ['/health', '/metrics', '/v1/models', '/v1/chat/completions', '/v1/messages', '/v1/messages/count_tokens'].includes(path)
        ? path
        : path.startsWith('/v1/models/')
          ? '/v1/models/{id}'
          : 'other';
      res.on('finish', () => metrics.requests.inc({ endpoint, status: String(res.statusCode) }));
      const method = req.method ?? 'GET';
      const allow = (m: string): void => {
        if (method !== m) throw new HttpError(405, 'invalid_request', `${path} accepts ${m} requests only`);
      };
      try {
        if (path === '/health') {
          allow('GET');
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
        if (keyDigest && !authorized(req, keyDigest)) {
          req.resume();
          throw new HttpError(401, 'authentication', 'Invalid or missing API key: send it as "Authorization: Bearer KEY" or "x-api-key: KEY"');
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
        const chat = path === '/v1/chat/completions' || path === '/v1/messages' || path === '/v1/messages/count_tokens';
        if (!chat) throw new HttpError(404, 'not_found', `There is no endpoint ${method} ${path}`);
        allow('POST');
        if (path === '/v1/messages/count_tokens') {
          await handleCountTokens(req, res, service, o.maxBodyBytes);
          return;
        }
        const ac = new AbortController();
        controllers.add(ac);
        res.on('close', () => {
          if (!res.writableFinished) ac.abort(new Error('The client closed the connection'));
          controllers.delete(ac);
        });
        if (path === '/v1/chat/completions') await handleChatCompletions(req, res, service, o.maxBodyBytes, ac.signal);
        else await handleMessages(req, res, service, o.maxBodyBytes, ac.signal);
      } catch (e) {
        const err = toHttpError(e);
        const headers: Record<string, string> = err.status === 413 ? { connection: 'close' } : {};
        if (!res.headersSent) sendError(res, api, err, headers);
        else res.end();
      }
    };

    const http = createHttpServer((req, res) => {
      void handle(req, res);
    });
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(o.port, o.host, () => {
        http.off('error', reject);
        resolve();
      });
    });
    const addr = http.address() as AddressInfo;
    const hostForUrl = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
    let closing: Promise<void> | undefined;
    const ctx = context;
    const st = store;
    return {
      url: `http://${hostForUrl}:${addr.port}`,
      host: addr.address,
      port: addr.port,
      model,
      context: ctx,
      metrics,
      store: st,
      close(): Promise<void> {
        closing ??= (async () => {
          const done = new Promise<void>((resolve) => http.close(() => resolve()));
          for (const ac of controllers) ac.abort(new Error('The server is closing'));
          http.closeIdleConnections();
          setTimeout(() => http.closeAllConnections(), 1000).unref();
          await done;
          await ctx.dispose();
          st.close();
          if (owned) await model.dispose();
        })();
        return closing;
      },
    };
  } catch (e) {
    await context?.dispose();
    store?.close();
    if (owned) await model.dispose();
    throw e;
  }
}
