// Models split across `llamux rpc-server` processes (issue 17): real processes on loopback,
// no mocks. The same scripted model loaded locally and across two RPC servers must give the
// same greedy tokens (plain text, a tool-call span, a session continue); an unreachable
// server is RPC_UNAVAILABLE before loading; a server killed mid-stream fails the requests on
// that model with RPC_UNAVAILABLE while the client process keeps serving local models and
// still exits cleanly.
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamuxError, loadModel, setLogger, type Context, type GenerateEvent, type Model } from '../../src/index.js';
import { ONE_THREAD, collectEvents, markersOf, script, testModel } from '../helpers/models.js';
import { projectRoot } from '../helpers/paths.js';
import { freePort, startRpcServer, stopRpcServer, type RpcServerProcess } from '../helpers/rpc-servers.js';

const ids = (t: ArrayLike<number> | undefined): number[] => Array.from(t ?? []);

async function rejection(p: Promise<unknown>): Promise<LlamuxError> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e).toBeInstanceOf(LlamuxError);
  return e as LlamuxError;
}

/** Every token a request sampled, from its events (text tokens and tool-call span tokens). */
function sampled(events: GenerateEvent[]): number[] {
  const out: number[] = [];
  for (const e of events) {
    if (e.type === 'text') out.push(...ids(e.tokens));
    if (e.type === 'toolCallEnd' || e.type === 'toolCallTruncated') out.push(...ids(e.tokens));
  }
  return out;
}

describe('loadModel() with rpcServers (two llamux rpc-server processes on loopback)', () => {
  let servers: RpcServerProcess[] = [];
  let endpoints: string[] = [];

  beforeAll(async () => {
    servers = [await startRpcServer(), await startRpcServer()];
    endpoints = servers.map((s) => s.endpoint);
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => stopRpcServer(s, 'SIGTERM')));
  });

  /** Runs fn on a context of `name` loaded locally and across the two servers. */
  async function bothWays<T>(name: Parameters<typeof testModel>[0], fn: (ctx: Context, model: Model) => Promise<T>): Promise<{ local: T; rpc: T }> {
    const run = async (rpc: boolean): Promise<T> => {
      const model = await loadModel(testModel(name).path, rpc ? { rpcServers: endpoints } : {});
      try {
        if (rpc) expect(model.rpc).toEqual({ servers: endpoints });
        else expect(model.rpc).toBeUndefined();
        const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 2, toolCallMarkers: markersOf(name) });
        try {
          return await fn(ctx, model);
        } finally {
          await ctx.dispose();
        }
      } finally {
        await model.dispose();
      }
    };
    return { local: await run(false), rpc: await run(true) };
  }

  it('gives the same greedy tokens as the local model, tool-call span included', async () => {
    const s = script('single-marker');
    const { local, rpc } = await bothWays('single-marker', async (ctx) =>
      collectEvents(ctx.generate({ prompt: Int32Array.from(s.promptTokens), temperature: 0, maxTokens: 64, emitTokenIds: true, detectToolCalls: true })),
    );
    expect(sampled(rpc)).toEqual(sampled(local));
    expect(sampled(local).length).toBeGreaterThan(0);
    const span = (evs: GenerateEvent[]) => evs.find((e) => e.type === 'toolCallEnd');
    expect(span(local)).toBeDefined();
    expect(span(rpc)).toEqual(span(local));
  });

  it('continues a session across the servers exactly as locally: tool call, then the answer after the result', async () => {
    const t1 = script('two-turn', 'turn1');
    const t2 = script('two-turn', 'turn2');
    const { local, rpc } = await bothWays('two-turn', async (ctx) => {
      const chat = ctx.createSession({ id: 'chat' });
      const r1 = await chat.generate({ prompt: Int32Array.from(t1.promptTokens), temperature: 0, maxTokens: 64, emitTokenIds: true, detectToolCalls: true }).result;
      const committed = chat.stats().committedTokens;
      const tail = t2.promptTokens.slice(committed);
      expect(t2.promptTokens.slice(0, committed)).toEqual([...t1.promptTokens, ...ids(r1.tokens)].slice(0, committed));
      const r2 = await chat.continue(Int32Array.from(tail), { temperature: 0, maxTokens: 64, emitTokenIds: true }).result;
      return { calls: r1.toolCalls.map((c) => c.text), t1: ids(r1.tokens), t2: ids(r2.tokens), text: r2.text, outcome: r2.cache.outcome, prefilled: r2.prefilledTokens, tail: tail.length };
    });
    expect(rpc).toEqual(local);
    expect(local.calls).toHaveLength(1);
    expect(local.text).toBe(t2.greedyText);
    expect(rpc.outcome).toBe('sticky');
    expect(rpc.prefilled).toBeLessThanOrEqual(rpc.tail + 1);
  });

  it('rejects with RPC_UNAVAILABLE, naming the endpoint, when a server does not answer', async () => {
    const port = await freePort();
    const e = await rejection(loadModel(testModel('single-marker').path, { rpcServers: [endpoints[0]!, `127.0.0.1:${port}`] }));
    expect(e.code).toBe('RPC_UNAVAILABLE');
    expect(e.message).toContain(`127.0.0.1:${port}`);
  });

  it('places the layers by tensorSplit: [1, 0] puts every offloaded layer on the first server', async () => {
    const buffers = async (tensorSplit: number[]): Promise<string[]> => {
      const lines: string[] = [];
      setLogger('info', (_level, msg) => {
        if (/RPC\d+\[.*model buffer size/.test(msg)) lines.push(msg);
      });
      try {
        const m = await loadModel(testModel('long-script').path, { rpcServers: endpoints, tensorSplit });
        await m.dispose();
      } finally {
        setLogger('warn');
      }
      return lines;
    };
    const first = await buffers([1, 0]);
    expect(first.length).toBeGreaterThan(0);
    expect(first.every((l) => l.includes(`[${endpoints[0]}]`))).toBe(true);
    const second = await buffers([0, 1]);
    expect(second.length).toBeGreaterThan(0);
    expect(second.every((l) => l.includes(`[${endpoints[1]}]`))).toBe(true);
  });

  it('rejects with INVALID_ARGUMENT when an endpoint is not host:port', async () => {
    for (const bad of [['localhost'], ['127.0.0.1:0'], ['127.0.0.1:99999'], [], ['http://x:1']]) {
      const e = await rejection(loadModel(testModel('single-marker').path, { rpcServers: bad }));
      expect(e.code).toBe('INVALID_ARGUMENT');
    }
  });
});

// A client process of its own: the failure parks ggml-rpc's threads and leaks the dead model
// by design, and the process must still answer local requests and exit by itself.
const KILL_CLIENT = `
import { loadModel } from './src/index.js';
import { createInterface } from 'node:readline';
const [modelPath, localPath, promptJson, localPromptJson, endpointsJson] = process.argv.slice(-5);
const endpoints = JSON.parse(endpointsJson);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const out = {};
const model = await loadModel(modelPath, { rpcServers: endpoints });
const ctx = await model.createContext({ threads: 1, batchThreads: 1, contextSize: 1024, sequences: 2 });
const prompt = Int32Array.from(JSON.parse(promptJson));
const a = ctx.generate({ prompt, temperature: 0, maxTokens: 1000, highWaterMark: 4 });
const b = ctx.generate({ prompt, temperature: 0, maxTokens: 1000, highWaterMark: 4 });
let n = 0;
try {
  for await (const ev of a) {
    if (ev.type === 'text' && ++n === 3) {
      // Wait (the engine pauses both requests by backpressure) until the server is dead.
      process.stdout.write('KILL\\n');
      await lines.next();
    }
  }
  out.a = 'finished';
} catch (e) { out.a = { code: e.code, message: e.message }; }
try { await b.result; out.b = 'finished'; } catch (e) { out.b = { code: e.code }; }
try { ctx.generate({ prompt: 'x' }); out.after = 'accepted'; } catch (e) { out.after = { code: e.code }; }
try { await model.createContext({}); out.create = 'created'; } catch (e) { out.create = { code: e.code }; }
out.rpc = model.rpc;
const local = await loadModel(localPath);
const lc = await local.createContext({ threads: 1, batchThreads: 1, contextSize: 512 });
out.local = (await lc.generate({ prompt: Int32Array.from(JSON.parse(localPromptJson)), temperature: 0, maxTokens: 8, emitTokenIds: true }).result).tokens.join(',');
await lc.dispose();
await local.dispose();
await ctx.dispose();
await model.dispose();
// Loading again: on the surviving server alone (this process still holds its connection), and
// on both once the dead one is back on the same port (a new connection, not the parked one).
const again = async (eps) => {
  const m = await loadModel(modelPath, { rpcServers: eps });
  const c = await m.createContext({ threads: 1, batchThreads: 1, contextSize: 1024 });
  const r = await c.generate({ prompt, temperature: 0, maxTokens: 8, emitTokenIds: true }).result;
  await c.dispose();
  await m.dispose();
  return r.tokens.join(',');
};
try { out.survivor = await again([endpoints[0]]); } catch (e) { out.survivor = { code: e.code, message: e.message }; }
process.stdout.write('WAITING\\n');
await lines.next();
try { out.restarted = await again(endpoints); } catch (e) { out.restarted = { code: e.code, message: e.message }; }
process.stdin.destroy();
process.stdout.write('RESULT ' + JSON.stringify(out) + '\\n');
`;

describe('an RPC server that dies mid-generation', () => {
  it('fails the requests on that model with RPC_UNAVAILABLE; the client keeps serving local models and exits cleanly', async () => {
    const servers = [await startRpcServer(), await startRpcServer()];
    try {
      const s = script('long-script');
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', '--input-type=module', '-e', KILL_CLIENT, '--', testModel('long-script').path, testModel('single-marker').path, JSON.stringify(s.promptTokens), JSON.stringify(script('single-marker').promptTokens), JSON.stringify(servers.map((x) => x.endpoint))],
        { cwd: projectRoot, env: { ...process.env, NODE_NO_WARNINGS: '1' }, stdio: ['pipe', 'pipe', 'pipe'] },
      );
      let stdout = '';
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.stdout.on('data', (d: Buffer) => {
        const before = stdout;
        stdout += d.toString();
        if (!before.includes('KILL') && stdout.includes('KILL')) void stopRpcServer(servers[1]!, 'SIGKILL').then(() => child.stdin.write('KILLED\n'));
        if (!before.includes('WAITING') && stdout.includes('WAITING')) {
          void startRpcServer({ port: servers[1]!.port }).then((s) => {
            servers.push(s);
            child.stdin.write('RESTARTED\n');
          });
        }
      });
      const code = await new Promise<number | null>((resolve) => {
        const timer = setTimeout(() => child.kill('SIGKILL'), 45_000);
        child.once('exit', (c) => {
          clearTimeout(timer);
          resolve(c);
        });
      });
      const line = stdout.split('\n').find((l) => l.startsWith('RESULT '));
      expect(line, `client output:\n${stdout}\n${stderr}`).toBeDefined();
      expect(code, `client output:\n${stdout}\n${stderr}`).toBe(0);
      const out = JSON.parse(line!.slice('RESULT '.length)) as Record<string, unknown>;
      const dead = servers[1]!.endpoint;
      expect(out.a).toMatchObject({ code: 'RPC_UNAVAILABLE' });
      expect((out.a as { message: string }).message).toContain(dead);
      expect(out.b).toEqual({ code: 'RPC_UNAVAILABLE' });
      expect(out.after).toEqual({ code: 'RPC_UNAVAILABLE' });
      expect(out.create).toEqual({ code: 'RPC_UNAVAILABLE' });
      expect(out.rpc).toMatchObject({ servers: servers.slice(0, 2).map((x) => x.endpoint), failed: expect.stringContaining(dead) });
      expect(out.local).toBe(script('single-marker').greedy.slice(0, 8).join(','));
      expect(out.survivor, JSON.stringify(out)).toBe(s.greedy.slice(0, 8).join(','));
      expect(out.restarted, JSON.stringify(out)).toBe(s.greedy.slice(0, 8).join(','));
      // The surviving server is still usable by a new client.
      const model = await loadModel(testModel('single-marker').path, { rpcServers: [servers[0]!.endpoint] });
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 512 });
      expect((await ctx.generate({ prompt: Int32Array.from(script('single-marker').promptTokens), temperature: 0, maxTokens: 4 }).result).text.length).toBeGreaterThan(0);
      await ctx.dispose();
      await model.dispose();
    } finally {
      await Promise.all(servers.map((s) => stopRpcServer(s)));
    }
  });
});

describe('createServer() with rpcServers', () => {
  it('answers through the servers, then 503 RPC_UNAVAILABLE (and /health 503) once one dies', async () => {
    const { createServer } = await import('../../src/server/index.js');
    const servers = [await startRpcServer(), await startRpcServer()];
    try {
      const server = await createServer({ modelPath: testModel('demo').path, rpcServers: servers.map((s) => s.endpoint), port: 0, ctx: 2048, parallel: 1, threads: 1 });
      const ask = () =>
        fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-llamux-conversation': 'c1' },
          body: JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], max_tokens: 8 }),
        });
      expect(server.model.rpc?.servers).toEqual(servers.map((s) => s.endpoint));
      const ok = await ask();
      expect(ok.status).toBe(200);
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
      await stopRpcServer(servers[1]!);
      const failed = await ask();
      expect(failed.status).toBe(503);
      expect(JSON.stringify(await failed.json())).toContain(servers[1]!.endpoint);
      const health = await fetch(`${server.url}/health`);
      expect(health.status).toBe(503);
      expect(await health.json()).toMatchObject({ status: 'error', error: { code: 'RPC_UNAVAILABLE' } });
      await server.close();
    } finally {
      await Promise.all(servers.map((s) => stopRpcServer(s)));
    }
  });
});
