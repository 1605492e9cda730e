// ModelPool (issue 38): models by name from a folder or a config, loaded on demand, LRU and
// idle unloads, pinned models, one load per model, unloads that wait for leases, the fit
// planner's memory budget, failed loads that leave the pool healthy.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelPool, isLlamuxError, modelSizesFromGguf, planFit, type FitDevice, type LlamuxError, type ModelLease, type UnloadReason } from '../../src/index.js';
import { readGgufFile } from '../../src/gguf/index.js';
import { ONE_THREAD } from '../helpers/models.js';
import { POOL_PROMPT, answerOf, poolFolder, writePoolModel, type PoolFolder } from '../helpers/pool-models.js';

const NAMES = ['alpha', 'beta', 'gamma'];
const CONTEXT = { ...ONE_THREAD, contextSize: 256, toolCallMarkers: false } as const;

async function answer(lease: ModelLease<unknown>): Promise<string> {
  const r = await lease.context.complete({ prompt: POOL_PROMPT, parseSpecial: true, temperature: 0, maxTokens: 32 });
  return r.text;
}

async function rejection(p: Promise<unknown>): Promise<LlamuxError> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(isLlamuxError(e), `expected a LlamuxError, got ${String(e)}`).toBe(true);
  return e as LlamuxError;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Unload events of a pool, in order. */
function unloads(pool: ModelPool<unknown>): Array<[string, UnloadReason]> {
  const out: Array<[string, UnloadReason]> = [];
  pool.on('unloaded', (e) => out.push([e.name, e.reason]));
  return out;
}

const stateOf = (pool: ModelPool<unknown>, name: string) => pool.status().find((s) => s.name === name)!.state;

describe('ModelPool', () => {
  let folder: PoolFolder;
  beforeAll(async () => {
    folder = await poolFolder(NAMES);
  });
  afterAll(() => folder.remove());

  it('names a folder\'s models by file stem: split files as one model, mmproj skipped, a subfolder by its name', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llamux-pool-layout-'));
    mkdirSync(join(dir, 'vision'), { recursive: true });
    for (const f of ['plain.gguf', 'big-00001-of-00002.gguf', 'big-00002-of-00002.gguf', 'mmproj-plain.gguf', 'notes.txt', 'vision/vision-q8.gguf', 'vision/mmproj-f16.gguf']) {
      writeFileSync(join(dir, f), 'x');
    }
    const pool = new ModelPool({ models: dir, memory: false });
    expect(pool.names.sort()).toEqual(['big', 'plain', 'vision']);
    const byName = Object.fromEntries(pool.status().map((s) => [s.name, s]));
    expect(byName.big!.path).toBe(join(dir, 'big-00001-of-00002.gguf'));
    expect(byName.vision!.path).toBe(join(dir, 'vision', 'vision-q8.gguf'));
    expect(pool.status().every((s) => s.state === 'unloaded' && !s.pinned && s.leases === 0)).toBe(true);
    rmSync(dir, { recursive: true, force: true });
  });

  it('loads a model on its first acquire, and each model answers with its own output', async () => {
    const pool = new ModelPool({ models: folder.dir, contextOptions: CONTEXT, memory: false });
    try {
      expect(pool.status().map((s) => s.state)).toEqual(['unloaded', 'unloaded', 'unloaded']);
      const a = await pool.acquire('alpha');
      expect(stateOf(pool, 'alpha')).toBe('loaded');
      expect(stateOf(pool, 'beta')).toBe('unloaded');
      const b = await pool.acquire('beta');
      expect(await answer(a)).toBe(answerOf('alpha'));
      expect(await answer(b)).toBe(answerOf('beta'));
      expect(a.context).not.toBe(b.context);
      expect(pool.status().find((s) => s.name === 'alpha')).toMatchObject({ leases: 1, progress: 1 });
      a.release();
      a.release(); // idempotent
      expect(pool.status().find((s) => s.name === 'alpha')!.leases).toBe(0);
      expect(() => a.context).toThrow(/released/);
      b.release();
    } finally {
      await pool.close();
    }
  });

  it('unloads the least recently used idle model when a load would exceed maxLoaded', async () => {
    const pool = new ModelPool({ models: folder.dir, contextOptions: CONTEXT, memory: false, maxLoaded: 2 });
    const events = unloads(pool);
    try {
      await pool.load('alpha');
      await pool.load('beta');
      (await pool.acquire('alpha')).release(); // alpha is now the most recently used
      const g = await pool.acquire('gamma');
      expect(events).toEqual([['beta', 'lru']]);
      expect(pool.status().map((s) => [s.name, s.state])).toEqual([['alpha', 'loaded'], ['beta', 'unloaded'], ['gamma', 'loaded']]);
      expect(await answer(g)).toBe(answerOf('gamma'));
      g.release();
    } finally {
      await pool.close();
    }
  });

  it('waits for a busy model to be released instead of unloading it at maxLoaded', async () => {
    const pool = new ModelPool({ models: folder.dir, contextOptions: CONTEXT, memory: false, maxLoaded: 1 });
    const events = unloads(pool);
    try {
      const a = await pool.acquire('alpha');
      let got = false;
      const b = pool.acquire('beta').then((l) => ((got = true), l));
      await sleep(100);
      expect(got).toBe(false);
      expect(stateOf(pool, 'alpha')).toBe('loaded');
      expect(await answer(a)).toBe(answerOf('alpha'));
      a.release();
      const lb = await b;
      expect(events).toEqual([['alpha', 'lru']]);
      expect(await answer(lb)).toBe(answerOf('beta'));
      lb.release();
    } finally {
      await pool.close();
    }
  });

  it('unloads a model left idle for idleUnloadMs, and never a pinned one', async () => {
    const pool = new ModelPool({
      models: { alpha: { path: folder.paths.alpha!, pinned: true }, beta: { path: folder.paths.beta! } },
      contextOptions: CONTEXT,
      memory: false,
      idleUnloadMs: 150,
    });
    const events = unloads(pool);
    try {
      await pool.load('alpha');
      await pool.load('beta');
      await sleep(600);
      expect(events).toEqual([['beta', 'idle']]);
      expect(stateOf(pool, 'alpha')).toBe('loaded');
      expect(pool.status().find((s) => s.name === 'alpha')!.pinned).toBe(true);
      // Used again: it loads again, and a lease held past the idle time keeps it loaded.
      const b = await pool.acquire('beta');
      await sleep(400);
      expect(stateOf(pool, 'beta')).toBe('loaded');
      expect(await answer(b)).toBe(answerOf('beta'));
      b.release();
    } finally {
      await pool.close();
    }
  });

  it('never unloads a pinned model for the LRU, and refuses pinning more models than maxLoaded allows', async () => {
    const pool = new ModelPool({
      models: { alpha: { path: folder.paths.alpha!, pinned: true }, beta: { path: folder.paths.beta! }, gamma: { path: folder.paths.gamma! } },
      contextOptions: CONTEXT,
      memory: false,
      maxLoaded: 2,
    });
    const events = unloads(pool);
    try {
      await pool.load('alpha');
      await pool.load('beta');
      await pool.load('gamma'); // alpha is the least recently used, but pinned
      expect(events).toEqual([['beta', 'lru']]);
      expect(stateOf(pool, 'alpha')).toBe('loaded');
    } finally {
      await pool.close();
    }
    const e = (() => {
      try {
        new ModelPool({ models: { alpha: { path: folder.paths.alpha!, pinned: true }, beta: { path: folder.paths.beta! } }, maxLoaded: 1, memory: false });
      } catch (err) {
        return err as LlamuxError;
      }
      return undefined;
    })();
    expect(e?.code).toBe('INVALID_ARGUMENT');
    expect(e?.message).toMatch(/1 pinned model but maxLoaded is 1/);
  });

  it('serves every acquire that arrives during a load from that one load', async () => {
    const pool = new ModelPool({ models: folder.dir, contextOptions: { ...CONTEXT, sequences: 4 }, memory: false });
    let loads = 0;
    pool.on('loading', () => loads++);
    const progress: number[] = [];
    pool.on('progress', (e) => progress.push(e.progress));
    try {
      const first = pool.acquire('alpha');
      expect(stateOf(pool, 'alpha')).toBe('loading');
      const leases = await Promise.all([first, pool.acquire('alpha'), pool.acquire('alpha'), pool.acquire('alpha')]);
      expect(loads).toBe(1);
      expect(new Set(leases.map((l) => l.model)).size).toBe(1);
      expect(progress.at(-1)).toBe(1);
      expect(pool.status().find((s) => s.name === 'alpha')!.leases).toBe(4);
      const texts = await Promise.all(leases.map(answer));
      expect(texts).toEqual(Array(4).fill(answerOf('alpha')));
      for (const l of leases) l.release();
    } finally {
      await pool.close();
    }
  });

  it('unload() waits for the generation running on a lease, which completes', async () => {
    const pool = new ModelPool({ models: folder.dir, contextOptions: CONTEXT, memory: false });
    try {
      const lease = await pool.acquire('alpha');
      const gen = lease.context.generate({ prompt: POOL_PROMPT, parseSpecial: true, temperature: 0, maxTokens: 32 });
      let unloaded = false;
      const unloading = pool.unload('alpha').then((r) => ((unloaded = true), r));
      await sleep(100);
      expect(unloaded).toBe(false);
      expect(stateOf(pool, 'alpha')).toBe('unloading');
      expect((await gen.result).text).toBe(answerOf('alpha'));
      await sleep(50);
      expect(unloaded).toBe(false); // the lease is still held
      lease.release();
      expect(await unloading).toBe(true);
      expect(stateOf(pool, 'alpha')).toBe('unloaded');
      expect(await pool.unload('alpha')).toBe(false);
      // An acquire after the unload loads it again.
      const again = await pool.acquire('alpha');
      expect(await answer(again)).toBe(answerOf('alpha'));
      again.release();
    } finally {
      await pool.close();
    }
  });

  it('rejects an unknown name with MODEL_NOT_FOUND listing the names', async () => {
    const pool = new ModelPool({ models: folder.dir, memory: false });
    const e = await rejection(pool.acquire('delta'));
    expect(e.code).toBe('MODEL_NOT_FOUND');
    expect(e.message).toBe('The pool has no model "delta"; it has "alpha", "beta", "gamma"');
    await expect(pool.unload('delta')).rejects.toMatchObject({ code: 'MODEL_NOT_FOUND' });
    await pool.close();
  });

  it('a corrupt model file fails with a typed error, the pool keeps serving, and a later acquire retries', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llamux-pool-corrupt-'));
    const broken = join(dir, 'broken.gguf');
    writeFileSync(broken, Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(64, 0xff)]));
    await writePoolModel(join(dir, 'fine.gguf'), 'fine');
    const pool = new ModelPool({ models: dir, contextOptions: CONTEXT, memory: false });
    const failed: string[] = [];
    pool.on('loadFailed', (e) => failed.push(e.name));
    try {
      const e = await rejection(pool.acquire('broken'));
      expect(e.name).toBe('ModelLoadError');
      expect(e.code).toBe('MODEL_INVALID');
      expect(e.message).toMatch(/^Model "broken" failed to load: /);
      expect(failed).toEqual(['broken']);
      const st = pool.status().find((s) => s.name === 'broken')!;
      expect(st).toMatchObject({ state: 'unloaded', error: { code: 'MODEL_INVALID' } });
      const fine = await pool.acquire('fine');
      expect(await answer(fine)).toBe(answerOf('fine'));
      fine.release();
      // The file is repaired: the next acquire loads it.
      await writePoolModel(broken, 'broken');
      const repaired = await pool.acquire('broken');
      expect(await answer(repaired)).toBe(answerOf('broken'));
      expect(pool.status().find((s) => s.name === 'broken')!.error).toBeUndefined();
      repaired.release();
    } finally {
      await pool.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an aborted acquire rejects with ABORTED; the load it started completes for the others', async () => {
    const pool = new ModelPool({ models: folder.dir, contextOptions: CONTEXT, memory: false });
    try {
      const ac = new AbortController();
      const waiting = pool.acquire('beta', { signal: ac.signal });
      const other = pool.acquire('beta');
      ac.abort(new Error('client left'));
      const e = await rejection(waiting);
      expect(e.code).toBe('ABORTED');
      expect(e.name).toBe('AbortError');
      const lease = await other;
      expect(await answer(lease)).toBe(answerOf('beta'));
      lease.release();
      await expect(pool.acquire('beta', { signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'ABORTED' });
    } finally {
      await pool.close();
    }
    await expect(pool.acquire('alpha')).rejects.toMatchObject({ code: 'DISPOSED' });
  });

  it('a model whose every waiter gave up during its load still unloads when idle', async () => {
    const pool = new ModelPool({ models: folder.dir, contextOptions: CONTEXT, memory: false, idleUnloadMs: 100 });
    const events = unloads(pool);
    try {
      const ac = new AbortController();
      const loaded = new Promise((r) => pool.once('loaded', r));
      const waiting = pool.acquire('gamma', { signal: ac.signal });
      ac.abort();
      await expect(waiting).rejects.toMatchObject({ code: 'ABORTED' });
      await loaded;
      await sleep(500);
      expect(events).toEqual([['gamma', 'idle']]);
    } finally {
      await pool.close();
    }
  });

  describe('the fit planner and the memory budget', () => {
    /** Host bytes the fit planner expects `name` to need on a CPU-only machine at the test's context. */
    async function need(name: string): Promise<number> {
      const sizes = modelSizesFromGguf(await readGgufFile(folder.paths[name]!));
      return planFit(sizes, [{ name: 'CPU', type: 'cpu', memoryFree: 1e12, memoryTotal: 1e12 }], { contextSize: CONTEXT.contextSize }).hostBytes;
    }
    const cpuOnly = (bytes: number): { devices: FitDevice[] } => ({ devices: [{ name: 'CPU', type: 'cpu', memoryFree: bytes, memoryTotal: bytes }] });

    it('unloads the least recently used model when the next one does not fit beside it', async () => {
      const [a, b] = [await need('alpha'), await need('beta')];
      // Room for either model alone, not for both.
      const pool = new ModelPool({ models: folder.dir, contextOptions: CONTEXT, memory: cpuOnly(Math.max(a, b) + Math.floor(Math.min(a, b) / 2)) });
      const events = unloads(pool);
      try {
        await pool.load('alpha');
        const lb = await pool.acquire('beta');
        expect(events).toEqual([['alpha', 'memory']]);
        expect(await answer(lb)).toBe(answerOf('beta'));
        lb.release();
      } finally {
        await pool.close();
      }
      // With room for both, nothing is unloaded.
      const roomy = new ModelPool({ models: folder.dir, contextOptions: CONTEXT, memory: cpuOnly(a + b + 1) });
      const none = unloads(roomy);
      try {
        await roomy.load('alpha');
        await roomy.load('beta');
        expect(none).toEqual([]);
      } finally {
        await roomy.close();
      }
    });

    it('refuses a model that does not fit even alone with MODEL_TOO_LARGE, unloading nothing', async () => {
      const a = await need('alpha');
      const pool = new ModelPool({ models: folder.dir, contextOptions: CONTEXT, memory: cpuOnly(a + 1) });
      const events = unloads(pool);
      try {
        await pool.load('alpha');
        // A context 16 times larger needs more KV than the budget holds.
        const big = new ModelPool({ models: { alpha: { path: folder.paths.alpha!, contextOptions: { contextSize: 4096 } } }, contextOptions: CONTEXT, memory: cpuOnly(a + 1) });
        const e = await rejection(big.acquire('alpha'));
        expect(e.code).toBe('MODEL_TOO_LARGE');
        expect(e.message).toMatch(/^The model "alpha" needs about [\d,]+ MiB of host memory with a 4096-token context, more than the pool's budget of [\d,]+ MiB with no other model loaded$/);
        expect(big.status()[0]).toMatchObject({ state: 'unloaded', error: { code: 'MODEL_TOO_LARGE' } });
        await big.close();
        expect(events).toEqual([]);
        expect(stateOf(pool, 'alpha')).toBe('loaded');
      } finally {
        await pool.close();
      }
    });

    it('refuses a model that fits only where a pinned model sits', async () => {
      const [a, b] = [await need('alpha'), await need('beta')];
      const pool = new ModelPool({
        models: { alpha: { path: folder.paths.alpha!, pinned: true }, beta: { path: folder.paths.beta! } },
        contextOptions: CONTEXT,
        memory: cpuOnly(Math.max(a, b) + Math.floor(Math.min(a, b) / 2)),
      });
      try {
        await pool.load('alpha');
        const e = await rejection(pool.acquire('beta'));
        expect(e.code).toBe('MODEL_TOO_LARGE');
        expect(e.message).toMatch(/the pinned models \(alpha\) leave about/);
        expect(stateOf(pool, 'alpha')).toBe('loaded');
      } finally {
        await pool.close();
      }
    });
  });
});
