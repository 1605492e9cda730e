// The server's router mode (issue 38): several models in one server, picked by each request's
// `model`, loaded on demand, /v1/models with their states, POST /models/load and /models/unload,
// LRU and idle unloads, pinned models, typed errors in each API's shape.
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLlamuxError } from '../../src/index.js';
import { createServer, type LlamuxServer, type ServerOptions } from '../../src/server/index.js';
import { anthropicFor, openaiFor } from './clients.js';
import { POOL_QUESTION, answerOf, poolFolder, type PoolFolder } from '../helpers/pool-models.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const quiet = () => {};
const BASE = { port: 0, ctx: 512, parallel: 2, threads: 1, tokenizeWorkers: 1, markers: false, log: quiet, modelsMemory: false } as const satisfies Partial<ServerOptions>;

type ModelRow = { id: string; status: { value: string; progress?: number; failed?: boolean; error?: { code: string } }; pinned: boolean };

async function models(server: LlamuxServer, headers: Record<string, string> = {}): Promise<Record<string, ModelRow>> {
  const r = await fetch(`${server.url}/v1/models`, { headers });
  expect(r.status).toBe(200);
  const body = (await r.json()) as { data: ModelRow[] };
  return Object.fromEntries(body.data.map((m) => [m.id, m]));
}

const stateOf = async (server: LlamuxServer, name: string) => (await models(server))[name]!.status.value;

function post(server: LlamuxServer, path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${server.url}${path}`, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json', ...headers } });
}

async function chat(server: LlamuxServer, model: string, headers: Record<string, string> = {}): Promise<Response> {
  return post(server, '/v1/chat/completions', { model, messages: [{ role: 'user', content: POOL_QUESTION }], temperature: 0, max_tokens: 32 }, headers);
}

async function answer(server: LlamuxServer, model: string, headers: Record<string, string> = {}): Promise<string> {
  const r = await chat(server, model, headers);
  const body = (await r.json()) as { model: string; choices: Array<{ message: { content: string } }> };
  expect(r.status, JSON.stringify(body)).toBe(200);
  expect(body.model).toBe(model);
  return body.choices[0]!.message.content;
}

describe('router mode (createServer({ models }))', () => {
  let folder: PoolFolder;
  let server: LlamuxServer;
  let openai: OpenAI;

  beforeAll(async () => {
    folder = await poolFolder(['alpha', 'beta', 'gamma']);
    // A corrupt model beside the good ones.
    writeFileSync(join(folder.dir, 'broken.gguf'), Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(64, 0xff)]));
    server = await createServer({ ...BASE, models: folder.dir, modelsMax: 2 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server?.close();
    folder?.remove();
  });

  it('lists every model of the folder, none loaded yet, in the OpenAI and Anthropic shapes', async () => {
    const list = await models(server);
    expect(Object.keys(list).sort()).toEqual(['alpha', 'beta', 'broken', 'gamma']);
    for (const m of Object.values(list)) expect(m).toMatchObject({ object: 'model', owned_by: 'llamux', status: { value: 'unloaded' }, pinned: false });
    const r = await fetch(`${server.url}/v1/models`, { headers: { 'anthropic-version': '2023-06-01' } });
    const body = (await r.json()) as { data: Array<{ type: string; id: string; status: { value: string } }>; has_more: boolean };
    expect(body.has_more).toBe(false);
    expect(body.data.map((m) => [m.type, m.id, m.status.value])).toContainEqual(['model', 'gamma', 'unloaded']);
    // llama-server's path lists the same
    const same = (await (await fetch(`${server.url}/models`)).json()) as { data: ModelRow[] };
    expect(same.data.map((m) => m.id).sort()).toEqual(['alpha', 'beta', 'broken', 'gamma']);
    const one = (await (await fetch(`${server.url}/v1/models/beta`)).json()) as ModelRow;
    expect(one).toMatchObject({ id: 'beta', status: { value: 'unloaded' } });
  });

  it('routes each request by its model (OpenAI and Anthropic), loading it on demand', async () => {
    expect(await answer(server, 'alpha')).toBe(answerOf('alpha'));
    expect(await stateOf(server, 'alpha')).toBe('loaded');
    expect(await stateOf(server, 'beta')).toBe('unloaded');
    const c = await openai.chat.completions.create({ model: 'beta', messages: [{ role: 'user', content: POOL_QUESTION }], temperature: 0, max_tokens: 32 });
    expect(c.choices[0]!.message.content).toBe(answerOf('beta'));
    const m = await anthropicFor(server).messages.create({ model: 'alpha', max_tokens: 32, messages: [{ role: 'user', content: POOL_QUESTION }] });
    expect(m.model).toBe('alpha');
    expect(m.content.map((c) => (c.type === 'text' ? c.text : c.type))).toEqual([answerOf('alpha')]);
    // /tokenize runs on the named model's vocabulary: " beta," is one token of beta's, bytes in alpha's.
    const tok = async (model: string) => ((await (await post(server, '/tokenize', { model, content: ' beta,' })).json()) as { tokens: number[] }).tokens.length;
    expect(await tok('beta')).toBe(1);
    expect(await tok('alpha')).toBeGreaterThan(1);
  });

  it('unloads the least recently used model at --models-max', async () => {
    await post(server, '/models/load', { model: 'alpha' });
    await post(server, '/models/load', { model: 'beta' });
    await answer(server, 'alpha'); // beta is now the least recently used
    const unloaded: string[] = [];
    server.pool!.on('unloaded', (e) => unloaded.push(`${e.name}:${e.reason}`));
    expect(await answer(server, 'gamma')).toBe(answerOf('gamma'));
    expect(unloaded).toEqual(['beta:lru']);
    const list = await models(server);
    expect([list.alpha!.status.value, list.beta!.status.value, list.gamma!.status.value]).toEqual(['loaded', 'unloaded', 'loaded']);
  });

  it('an unknown model is a 404 model_not_found in each API\'s shape, naming the models', async () => {
    const r = await chat(server, 'delta');
    expect(r.status).toBe(404);
    const body = (await r.json()) as { error: { message: string; type: string; code: string; param: string } };
    expect(body.error).toMatchObject({ type: 'invalid_request_error', code: 'model_not_found', param: 'model' });
    expect(body.error.message).toBe('The model "delta" does not exist on this server; it serves "alpha", "beta", "broken", "gamma"');
    const a = await post(server, '/v1/messages', { model: 'delta', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    expect(a.status).toBe(404);
    expect(await a.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error', message: expect.stringMatching(/^The model "delta" does not exist/) } });
    expect((await fetch(`${server.url}/v1/models/delta`)).status).toBe(404);
    expect((await post(server, '/models/load', { model: 'delta' })).status).toBe(404);
    // With several models, a request must name one.
    const none = await post(server, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] });
    expect(none.status).toBe(400);
    expect(((await none.json()) as { error: { message: string } }).error.message).toMatch(/^"model" is required: this server serves "alpha"/);
  });

  it('a corrupt model file answers 500 model_load_failed, /v1/models says why, and the other models still answer', async () => {
    const r = await chat(server, 'broken');
    expect(r.status).toBe(500);
    const body = (await r.json()) as { error: { message: string; type: string; code: string } };
    expect(body.error).toMatchObject({ type: 'server_error', code: 'model_load_failed' });
    expect(body.error.message).toMatch(/^Model "broken" failed to load: /);
    const a = await post(server, '/v1/messages', { model: 'broken', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    expect(a.status).toBe(500);
    expect(await a.json()).toMatchObject({ type: 'error', error: { type: 'api_error' } });
    expect((await models(server)).broken!.status).toMatchObject({ value: 'unloaded', failed: true, error: { code: 'MODEL_INVALID' } });
    expect(await answer(server, 'alpha')).toBe(answerOf('alpha'));
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('POST /models/load and /models/unload load and unload a model', async () => {
    await post(server, '/models/unload', { model: 'gamma' });
    const load = await post(server, '/models/load', { model: 'gamma' });
    expect(load.status).toBe(200);
    expect(await load.json()).toEqual({ success: true, model: 'gamma', status: 'loaded' });
    expect(await stateOf(server, 'gamma')).toBe('loaded');
    const unload = await post(server, '/models/unload', { model: 'gamma' });
    expect(await unload.json()).toEqual({ success: true, model: 'gamma', unloaded: true });
    expect(await stateOf(server, 'gamma')).toBe('unloaded');
    expect(await (await post(server, '/models/unload', { model: 'gamma' })).json()).toEqual({ success: true, model: 'gamma', unloaded: false });
    expect((await fetch(`${server.url}/models/load`)).status).toBe(405);
    const bad = await post(server, '/models/load', { name: 'gamma' });
    expect(bad.status).toBe(400);
    const failed = await post(server, '/models/load', { model: 'broken' });
    expect(failed.status).toBe(500);
    expect(((await failed.json()) as { error: { code: string } }).error.code).toBe('model_load_failed');
  });

  it('requests arriving while a model loads share that one load', async () => {
    await post(server, '/models/unload', { model: 'beta' });
    let loads = 0;
    const count = () => loads++;
    server.pool!.on('loading', count);
    const seen: ModelRow['status'][] = [];
    const poll = setInterval(() => {
      void models(server).then((m) => seen.push(m.beta!.status), () => {});
    }, 5);
    try {
      const texts = await Promise.all([answer(server, 'beta'), answer(server, 'beta'), answer(server, 'beta')]);
      expect(texts).toEqual(Array(3).fill(answerOf('beta')));
      expect(loads).toBe(1);
      // The load was visible in /v1/models meanwhile, with its progress.
      expect(seen.some((st) => st.value === 'loading' && typeof st.progress === 'number' && st.progress >= 0 && st.progress <= 1)).toBe(true);
    } finally {
      clearInterval(poll);
      server.pool!.off('loading', count);
    }
  });

  it('/models/unload waits for the request holding the model, then unloads it', async () => {
    await post(server, '/models/load', { model: 'alpha' });
    const lease = await server.pool!.acquire('alpha'); // a request running on alpha
    let done = false;
    const unloading = post(server, '/models/unload', { model: 'alpha' }).then(async (r) => ((done = true), r.json()));
    await sleep(200);
    expect(done).toBe(false);
    expect(await stateOf(server, 'alpha')).toBe('unloading');
    lease.release();
    expect(await unloading).toEqual({ success: true, model: 'alpha', unloaded: true });
    expect(await stateOf(server, 'alpha')).toBe('unloaded');
  });

  it('keeps each model\'s conversations to itself', async () => {
    const conv = { 'x-llamux-conversation': 'shared-id' };
    expect(await answer(server, 'beta', conv)).toBe(answerOf('beta'));
    expect(await answer(server, 'gamma', conv)).toBe(answerOf('gamma'));
    expect(await answer(server, 'beta', conv)).toBe(answerOf('beta'));
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/^llamux_sessions \d+$/m);
  });

  it('a single-model server is not a router: the options are refused together', async () => {
    const refused = async (o: ServerOptions) => {
      const e = await createServer(o).then(() => undefined, (err: unknown) => err);
      expect(isLlamuxError(e, 'INVALID_ARGUMENT'), String(e)).toBe(true);
      return (e as Error).message;
    };
    expect(await refused({ ...BASE, models: folder.dir, modelPath: folder.paths.alpha! })).toMatch(/exactly one of "model", "modelPath" and "models"/);
    expect(await refused({ port: 0, modelPath: folder.paths.alpha!, modelsMax: 2 })).toMatch(/apply to router mode/);
    expect(() => server.model).toThrow(/router mode/);
  });
});

describe('router mode: idle unload, pinned models, the memory budget', () => {
  let folder: PoolFolder;
  beforeAll(async () => {
    folder = await poolFolder(['alpha', 'beta', 'gamma']);
  });
  afterAll(() => folder?.remove());

  it('--sleep-idle-seconds unloads a model nobody used', async () => {
    const server = await createServer({ ...BASE, models: folder.dir, sleepIdleSeconds: 0.2 });
    try {
      expect(await answer(server, 'beta')).toBe(answerOf('beta'));
      expect(await stateOf(server, 'beta')).toBe('loaded');
      await sleep(700);
      expect(await stateOf(server, 'beta')).toBe('unloaded');
    } finally {
      await server.close();
    }
  });

  it('a JSON config pins a model: loaded at start, never unloaded by the LRU or idle', async () => {
    const config = join(folder.dir, 'models.json');
    writeFileSync(config, JSON.stringify({ main: { path: 'alpha.gguf', pinned: true }, second: { path: 'beta.gguf' }, third: { path: 'gamma.gguf' } }));
    const state = mkdtempSync(join(tmpdir(), 'llamux-router-state-'));
    const server = await createServer({ ...BASE, models: config, modelsMax: 2, sleepIdleSeconds: 0.2, storePath: join(state, 'calls.sqlite'), cacheDir: join(state, 'kv') });
    try {
      const list = await models(server);
      expect(list.main).toMatchObject({ pinned: true, status: { value: 'loaded' } });
      expect(list.second).toMatchObject({ pinned: false, status: { value: 'unloaded' } });
      expect(await answer(server, 'second')).toBe(answerOf('beta'));
      expect(await answer(server, 'third')).toBe(answerOf('gamma')); // evicts "second", not "main"
      expect(await stateOf(server, 'second')).toBe('unloaded');
      await sleep(700);
      expect(await stateOf(server, 'third')).toBe('unloaded');
      expect(await stateOf(server, 'main')).toBe('loaded');
      expect(await answer(server, 'main')).toBe(answerOf('alpha'));
      // Each model's tool-call store and disk tier are its own (storePath's own file holds the
      // server's stored responses of /v1/responses, once one is written).
      const stores = readdirSync(state).filter((f) => f.endsWith('.sqlite') && f !== 'calls.sqlite').sort();
      expect(stores).toEqual([expect.stringMatching(/^calls-main-[0-9a-f]{8}\.sqlite$/), expect.stringMatching(/^calls-second-[0-9a-f]{8}\.sqlite$/), expect.stringMatching(/^calls-third-[0-9a-f]{8}\.sqlite$/)]);
      expect(readdirSync(join(state, 'kv')).sort()).toEqual([expect.stringMatching(/^main-/), expect.stringMatching(/^second-/), expect.stringMatching(/^third-/)]);
    } finally {
      await server.close();
      rmSync(state, { recursive: true, force: true });
    }
  });

  it('a model the memory budget cannot hold answers 500 model_too_large and the server keeps serving', async () => {
    // 1 MiB of host memory: less than any model's compute buffer alone.
    const server = await createServer({ ...BASE, models: folder.dir, modelsMemory: { devices: [{ name: 'CPU', type: 'cpu', memoryFree: 1 << 20, memoryTotal: 1 << 20 }] } });
    try {
      const r = await chat(server, 'alpha');
      expect(r.status).toBe(500);
      const body = (await r.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('model_too_large');
      expect(body.error.message).toMatch(/^The model "alpha" needs about [\d,]+ MiB of host memory .* more than the pool's budget of 1 MiB/);
      expect((await models(server)).alpha!.status).toMatchObject({ value: 'unloaded', failed: true, error: { code: 'MODEL_TOO_LARGE' } });
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
    } finally {
      await server.close();
    }
  });
});
