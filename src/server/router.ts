// Which model a request runs on. One server = one model (the single-model router), or a
// ModelPool (router mode, `--models`): the request body's `model` picks the model, loaded on
// demand, and the request holds a lease on it until its response ends.
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { z } from 'zod';
import type { Context } from '../engine/context.js';
import { isLlamuxError } from '../errors.js';
import type { Model } from '../model/model.js';
import { ModelLoadError, ModelPool, type ModelPoolEntry, type ModelPoolOptions, type PooledModelStatus } from '../model/pool.js';
import type { LoadModelOptions, SpeculativeOptions } from '../options.js';
import { HttpError, parseBody, readJson, sendJson } from './http.js';
import type { CacheStatsLike, ServerMetrics } from './metrics.js';
import { createModelService, serviceContextOptions, type ModelService, type ModelServiceSettings } from './model-service.js';
import type { ChatService, ServerLog } from './service.js';

/** The model a request runs on, held until `release()`. */
export interface ModelTarget {
  readonly name: string;
  readonly context: Context;
  readonly service: ChatService;
  release(): void;
}

export interface ModelRouter {
  /** Router mode: the pool (model states, loads, unloads). */
  readonly pool?: ModelPool<ModelService>;
  /**
   * The model of a POST request: the server's own, or (router mode) the body's `model`.
   * @throws HttpError 404 model_not_found, 400 (no model named with several served), 500
   *   model_load_failed / model_too_large
   */
  target(req: IncomingMessage, maxBodyBytes: number, signal: AbortSignal): Promise<ModelTarget>;
  /** GET /v1/models. */
  list(anthropic: boolean): unknown;
  /** GET /v1/models/{id}. */
  entry(id: string, anthropic: boolean): unknown;
  /** GET /health: status and body. */
  health(): { status: number; body: unknown };
  /** The cache counters /metrics shows (router mode: the loaded models' sums). */
  cacheStats(): CacheStatsLike | undefined;
  /** Router mode: GET /models, POST /models/load, POST /models/unload; false for other paths. */
  admin(path: string, method: string, req: IncomingMessage, res: ServerResponse, maxBodyBytes: number): Promise<boolean>;
  close(): Promise<void>;
}

function openAIEntry(id: string, created: number, extra: Record<string, unknown> = {}) {
  return { id, object: 'model', created, owned_by: 'llamux', ...extra };
}

function anthropicEntry(id: string, created: number, extra: Record<string, unknown> = {}) {
  return { type: 'model', id, display_name: id, created_at: new Date(created * 1000).toISOString(), ...extra };
}

function listBody(entries: Array<Record<string, unknown> & { id: string }>, anthropic: boolean) {
  return anthropic
    ? { data: entries, has_more: false, first_id: entries[0]?.id ?? null, last_id: entries.at(-1)?.id ?? null }
    : { object: 'list', data: entries };
}

/** The one model of a single-model server: every request runs on it, whatever `model` says. */
export function singleModelRouter(name: string, model: Model, context: Context, service: ChatService, started: number): ModelRouter {
  const target: ModelTarget = { name, context, service, release: () => {} };
  // OpenAI's list carries what the model reads besides text (a projector: images, audio)
  const capabilities = { capabilities: { vision: model.capabilities.vision, audio: model.capabilities.audio } };
  const entry = (id: string, anthropic: boolean) => (anthropic ? anthropicEntry(id, started) : openAIEntry(id, started, capabilities));
  return {
    target: () => Promise.resolve(target),
    list: (anthropic) => listBody([entry(name, anthropic)], anthropic),
    // Any model name is served by the loaded model.
    entry,
    health() {
      // An RPC server holding the model's layers died: this instance cannot answer any
      // more (a balancer should route elsewhere); restart it once the server is back.
      const failed = model.rpc?.failed;
      if (failed !== undefined) return { status: 503, body: { status: 'error', model: name, error: { code: 'RPC_UNAVAILABLE', message: failed } } };
      const c = context.cacheStats();
      return {
        status: 200,
        body: {
          status: 'ok',
          model: name,
          contextSize: context.settings.contextSize,
          parallel: context.settings.sequences,
          pendingRequests: context.pendingRequests,
          sessions: c.sessions,
          cache: { ramBytes: c.ramBytes, ramEntries: c.ramEntries, diskBytes: c.diskBytes, diskEntries: c.diskEntries },
        },
      };
    },
    cacheStats: () => context.cacheStats(),
    admin: () => Promise.resolve(false),
    close: () => Promise.resolve(),
  };
}

/** What router mode needs beyond the per-model settings. */
export interface PoolRouterSettings extends ModelServiceSettings {
  models: string | Record<string, ModelPoolEntry>;
  ctx: number;
  modelsMax?: number;
  sleepIdleSeconds?: number;
  modelsMemory?: ModelPoolOptions['memory'];
  speculative?: SpeculativeOptions;
  rpcServers?: string[];
  onProgress?: (progress: number) => void;
}

/** A file-name-safe, collision-free form of a model name (its store and disk-cache paths). */
function fileSafe(name: string): string {
  return `${name.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 64)}-${createHash('sha256').update(name).digest('hex').slice(0, 8)}`;
}

/** `store.sqlite` → `store-<model>.sqlite`. */
function storePathFor(path: string, name: string): string {
  const m = /^(.*?)(\.[A-Za-z0-9]{1,8})?$/.exec(path)!;
  return `${m[1]}-${fileSafe(name)}${m[2] ?? ''}`;
}

const ModelBody = z.object({ model: z.string().min(1).max(256) }).strict();

function modelNotFound(name: string, names: readonly string[]): HttpError {
  const err = new HttpError(404, 'not_found', `The model ${JSON.stringify(name.slice(0, 256))} does not exist on this server; it serves ${names.map((n) => JSON.stringify(n)).join(', ')}`, 'model');
  err.apiCode = 'model_not_found';
  return err;
}

/** A pool's load errors as HTTP errors: the server's own trouble (5xx), each with its code. */
function loadHttpError(e: unknown): unknown {
  if (e instanceof ModelLoadError) {
    const err = new HttpError(500, 'server', e.message);
    err.apiCode = 'model_load_failed';
    return err;
  }
  if (isLlamuxError(e, 'MODEL_TOO_LARGE')) {
    const err = new HttpError(500, 'server', e.message);
    err.apiCode = 'model_too_large';
    return err;
  }
  return e;
}

/**
 * Router mode: a ModelPool of the folder or config, one ChatService per loaded model.
 * Pinned models are loaded before it resolves.
 * @throws LlamuxError INVALID_ARGUMENT, MODEL_NOT_FOUND (no such folder or config), and the
 *   load errors of a pinned model
 */
export async function createPoolRouter(s: PoolRouterSettings, shared: { metrics: ServerMetrics; log: ServerLog }, started: number): Promise<ModelRouter> {
  const mtp = s.speculative?.mode === 'mtp';
  /** The loaded models' contexts (their cache counters, for /metrics). */
  const contexts = new Map<string, Context>();
  const loadOptions: Omit<LoadModelOptions, 'onProgress' | 'signal'> = {
    fit: { contextSize: s.ctx, sequences: s.parallel },
    ...(s.rpcServers ? { rpcServers: s.rpcServers } : {}),
    ...(mtp ? { mtp: true } : {}),
  };
  const pool = new ModelPool<ModelService>({
    models: s.models,
    ...(s.modelsMax !== undefined ? { maxLoaded: s.modelsMax } : {}),
    ...(s.sleepIdleSeconds !== undefined ? { idleUnloadMs: s.sleepIdleSeconds * 1000 } : {}),
    ...(s.modelsMemory !== undefined ? { memory: s.modelsMemory } : {}),
    loadOptions,
    // Each model's disk tier is a folder of its own.
    contextOptions: (name) => ({
      contextSize: s.ctx,
      ...serviceContextOptions({ ...s, ...(s.cacheDir !== undefined ? { cacheDir: join(s.cacheDir, fileSafe(name)) } : {}) }, s.speculative),
    }),
    attach: async ({ name, model, context, entry }) => {
      const svc = await createModelService(
        model,
        context,
        {
          ...s,
          ...(s.storePath !== undefined ? { storePath: storePathFor(s.storePath, name) } : {}),
          ...(entry.chatTemplate !== undefined ? { chatTemplate: entry.chatTemplate } : {}),
        },
        shared,
      );
      contexts.set(name, context);
      return svc;
    },
    detach: async (svc, { name }) => {
      contexts.delete(name);
      await svc.close();
    },
  });
  pool.on('loading', (e) => shared.log('info', `loading model "${e.name}"`));
  pool.on('loaded', (e) => shared.log('info', `model "${e.name}" loaded in ${Math.round(e.ms)} ms`));
  pool.on('loadFailed', (e) => shared.log('warn', e.error.message));
  pool.on('unloaded', (e) => shared.log('info', `model "${e.name}" unloaded (${e.reason})`));
  if (s.onProgress) {
    const onProgress = s.onProgress;
    pool.on('progress', (e) => onProgress(e.progress));
  }
  try {
    for (const st of pool.status()) if (st.pinned) await pool.load(st.name);
  } catch (e) {
    await pool.close();
    throw e;
  }

  const status = (st: PooledModelStatus) => ({
    status: {
      value: st.state,
      ...(st.state === 'loading' ? { progress: st.progress } : {}),
      ...(st.error ? { failed: true, error: st.error } : {}),
    },
    pinned: st.pinned,
  });
  const entryOf = (st: PooledModelStatus, anthropic: boolean) => (anthropic ? anthropicEntry(st.name, started, status(st)) : openAIEntry(st.name, started, status(st)));
  const find = (id: string): PooledModelStatus => {
    const st = pool.status().find((x) => x.name === id);
    if (!st) throw modelNotFound(id, pool.names);
    return st;
  };

  return {
    pool,
    async target(req, maxBodyBytes, signal) {
      const body = await readJson(req, maxBodyBytes);
      const named = (body as { model?: unknown } | null)?.model;
      let name: string;
      if (typeof named === 'string' && named !== '') name = named;
      else if (pool.names.length === 1) name = pool.names[0]!;
      else throw new HttpError(400, 'invalid_request', `"model" is required: this server serves ${pool.names.map((n) => JSON.stringify(n)).join(', ')}`, 'model');
      if (!pool.has(name)) throw modelNotFound(name, pool.names);
      const lease = await pool.acquire(name, { signal }).catch((e: unknown) => {
        throw loadHttpError(e);
      });
      return { name, context: lease.context, service: lease.attached.service, release: () => lease.release() };
    },
    list: (anthropic) => listBody(pool.status().map((st) => entryOf(st, anthropic)), anthropic),
    entry: (id, anthropic) => entryOf(find(id), anthropic),
    health() {
      const models = pool.status().map((st) => ({ name: st.name, ...status(st), leases: st.leases }));
      return { status: 200, body: { status: 'ok', models } };
    },
    cacheStats() {
      const sum: Record<string, number> = {};
      for (const context of contexts.values()) {
        for (const [k, v] of Object.entries(context.cacheStats())) if (typeof v === 'number') sum[k] = (sum[k] ?? 0) + v;
      }
      return { sessions: 0, pinnedSequences: 0, ramBytes: 0, ramEntries: 0, diskBytes: 0, spills: 0, preemptions: 0, restores: 0, diskRestores: 0, ramEvictions: 0, ...sum };
    },
    async admin(path, method, req, res, maxBodyBytes) {
      if (path === '/models') {
        if (method !== 'GET') throw new HttpError(405, 'invalid_request', '/models accepts GET requests only');
        sendJson(res, 200, listBody(pool.status().map((st) => entryOf(st, false)), false));
        return true;
      }
      if (path !== '/models/load' && path !== '/models/unload') return false;
      if (method !== 'POST') throw new HttpError(405, 'invalid_request', `${path} accepts POST requests only`);
      const { model } = parseBody(ModelBody, await readJson(req, maxBodyBytes));
      if (!pool.has(model)) throw modelNotFound(model, pool.names);
      if (path === '/models/load') {
        await pool.load(model).catch((e: unknown) => {
          throw loadHttpError(e);
        });
        sendJson(res, 200, { success: true, model, status: 'loaded' });
      } else {
        const unloaded = await pool.unload(model);
        sendJson(res, 200, { success: true, model, unloaded });
      }
      return true;
    },
    close: () => pool.close(),
  };
}
