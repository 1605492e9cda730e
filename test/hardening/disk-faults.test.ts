// Fault injection into the disk tier (issue 9): a full disk (ENOSPC, also in the middle of a
// write), a read-only file system (EROFS: permission errors even for root), files and folders that
// vanish between the index scan and the read, and a file replaced under the engine. Whatever the
// disk does, every request answers exactly its script, by recomputing when a state is unusable.
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadModel, type Context, type ContextOptions, type Model } from '../../src/index.js';
import { ONE_THREAD, script, testModel } from '../helpers/models.js';
import { tempDir as newTempDir } from '../helpers/paths.js';
import { faultyFs, filesBelow, type FaultyFs } from './fs-faults.js';

const s = script('long-script');
const scratch: string[] = [];
/** A fresh folder under .cache/tmp, removed after the file. */
function tempDir(name: string): string {
  const dir = newTempDir(name);
  scratch.push(dir);
  return dir;
}

/**
 * A prompt of `len` tokens that ends at script position `k`: BOS, a tag token, then the script's
 * tokens up to k. The `long-script` model's next token depends on the last token only, so the
 * greedy continuation is the script from k on, while prompts of different tags share nothing but
 * BOS: each one evicts the other from a single sequence, which writes it to the disk tier.
 */
interface P {
  tag: number;
  k: number;
  len: number;
}
const tokensOf = (p: P) => [1, 400 + p.tag, ...s.greedy.slice(p.k - (p.len - 2), p.k)];
const expectedAt = (p: P, n: number) => s.greedy.slice(p.k, p.k + n);
const states = (dir: string) => filesBelow(dir).filter((f) => f.endsWith('.lmxkv'));
const temps = (dir: string) => filesBelow(dir).filter((f) => f.includes('.tmp-'));
const DISK_ONLY: ContextOptions = { ...ONE_THREAD, contextSize: 1024, sequences: 1, cacheRamMb: 0, toolCallMarkers: false };
/** Bytes of one saved token of this model (K and V, f16, 384 wide, one layer). */
const TOKEN_BYTES = 1536;

describe('disk tier faults', () => {
  let model: Model;
  const mounts: FaultyFs[] = [];

  beforeAll(async () => {
    model = await loadModel(testModel('long-script').path);
  });
  afterAll(async () => {
    await model?.dispose();
    for (const m of mounts) m.dispose();
    for (const d of scratch) rmSync(d, { recursive: true, force: true });
  });

  /** Runs prompt `p` for `n` tokens and checks the output is the script. */
  async function exact(ctx: Context, p: P, n = 12) {
    const r = await ctx.complete({ prompt: tokensOf(p), maxTokens: n, temperature: 0, emitTokenIds: true });
    expect(Array.from(r.tokens!), `prompt ${JSON.stringify(p)}`).toEqual(expectedAt(p, n));
    expect(r.prefilledTokens).toBe(r.promptTokens - r.reusedTokens);
    return r;
  }
  const fromDisk = (r: { cache: { outcome: string; tier?: string } }) => r.cache.outcome === 'restored' && r.cache.tier === 'disk';

  /** Writes the states of the given prompts into `dir` (closing the context flushes the writes). */
  async function warm(dir: string, ps: P[]): Promise<void> {
    const ctx = await model.createContext({ ...DISK_ONLY, cacheDir: dir });
    for (const p of ps) await ctx.prefillOnly(tokensOf(p));
    await ctx.dispose();
  }

  /** The disk tier's view of `dir` at the start of a context (after one tiny request, not saved). */
  async function indexed(dir: string): Promise<number> {
    const ctx = await model.createContext({ ...DISK_ONLY, cacheDir: dir });
    await ctx.complete({ prompt: [1, 399], maxTokens: 1 });
    const n = ctx.cacheStats().diskEntries;
    await ctx.dispose();
    return n;
  }

  describe('a full disk (ENOSPC)', () => {
    let fs: FaultyFs;
    beforeAll(() => {
      fs = faultyFs('disk-full', 64);
      mounts.push(fs);
    });
    beforeEach(() => {
      for (const f of filesBelow(fs.dir)) rmSync(f);
    });

    it('answers every request by recomputing and leaves no partial file', async () => {
      fs.fill();
      if (fs.tmpfs) expect(fs.faulty()).toBe(true);
      const ctx = await model.createContext({ ...DISK_ONLY, cacheDir: fs.dir });
      const ps: P[] = [0, 1, 2, 3].map((tag) => ({ tag, k: 60 + 30 * tag, len: 16 + 20 * tag }));
      for (let round = 0; round < 3; round++) {
        for (const p of ps) expect(fromDisk(await exact(ctx, p))).toBe(false);
      }
      expect(ctx.cacheStats().diskRestores).toBe(0);
      await ctx.dispose(); // its final save fails too
      expect(states(fs.dir)).toEqual([]);
      expect(temps(fs.dir)).toEqual([]);
      expect(await indexed(fs.dir)).toBe(0);
      fs.free();
    });

    it('fails a write that runs out of space midway (removing the partial file) and keeps one that fits', async () => {
      // 56 KiB free: a 31-token state (~48 KB) fits, a 111-token state (~170 KB) dies midway.
      fs.fill(56 * 1024);
      const big: P = { tag: 10, k: 150, len: 100 };
      const small: P = { tag: 11, k: 60, len: 20 };
      const other: P = { tag: 12, k: 200, len: 100 };
      const ctx = await model.createContext({ ...DISK_ONLY, cacheDir: fs.dir });
      await exact(ctx, big);
      await exact(ctx, small); // evicts big: its write fails midway
      await exact(ctx, other); // evicts small: it fits
      await ctx.dispose(); // flushes; other's state does not fit
      expect(temps(fs.dir)).toEqual([]);
      const left = states(fs.dir);
      if (fs.tmpfs) expect(left).toHaveLength(1);
      expect(await indexed(fs.dir)).toBe(left.length);
      // The state that made it is restored and exact; the others are recomputed.
      const again = await model.createContext({ ...DISK_ONLY, cacheDir: fs.dir });
      const r = await exact(again, small, 20);
      if (fs.tmpfs) expect(r.cache).toMatchObject({ outcome: 'restored', tier: 'disk', reusedTokens: small.len - 1 });
      expect(fromDisk(await exact(again, big, 20))).toBe(false);
      expect(fromDisk(await exact(again, other, 20))).toBe(false);
      await again.dispose();
      fs.free();
    });

    it('writes again once space is freed', async () => {
      fs.fill();
      // 16-token prompts and maxTokens 1: 16-token states (~25 KB), two fit on 64 KiB.
      const a: P = { tag: 20, k: 40, len: 16 };
      const b: P = { tag: 21, k: 80, len: 16 };
      const c: P = { tag: 22, k: 120, len: 16 };
      const ctx = await model.createContext({ ...DISK_ONLY, cacheDir: fs.dir });
      await exact(ctx, a, 1);
      await exact(ctx, b, 1); // evicts a: no space
      // Writes run on the disk tier's own thread: give it time to meet the full disk.
      await new Promise((r) => setTimeout(r, 300));
      fs.free();
      await exact(ctx, c, 1); // evicts b: written
      await ctx.dispose(); // writes c
      expect(temps(fs.dir)).toEqual([]);
      if (fs.tmpfs) expect(states(fs.dir)).toHaveLength(2);
      const again = await model.createContext({ ...DISK_ONLY, cacheDir: fs.dir });
      expect(fromDisk(await exact(again, b, 20))).toBe(true);
      expect(fromDisk(await exact(again, a, 20))).toBe(false);
      expect(fromDisk(await exact(again, c, 20))).toBe(true);
      await again.dispose();
    });
  });

  describe('a read-only file system (EROFS)', () => {
    let fs: FaultyFs;
    let corrupt: string;
    const good: P = { tag: 30, k: 100, len: 60 };
    const bad: P = { tag: 31, k: 160, len: 60 };
    beforeAll(async () => {
      fs = faultyFs('disk-ro', 2048);
      mounts.push(fs);
      await warm(fs.dir, [good]);
      const first = states(fs.dir);
      expect(first).toHaveLength(1);
      await warm(fs.dir, [bad]);
      corrupt = states(fs.dir).find((f) => !first.includes(f))!;
      const bytes = readFileSync(corrupt);
      expect(bytes.length).toBeGreaterThan(bad.len * TOKEN_BYTES);
      bytes[bytes.length - 7] ^= 0xff; // inside the KV blob: only the checksum sees it
      writeFileSync(corrupt, bytes);
      fs.readOnly();
      if (fs.tmpfs) expect(fs.faulty()).toBe(true);
    });
    afterAll(() => fs.readWrite());

    it('restores what it can read, recomputes the rest, and never restores a corrupt file it cannot delete', async () => {
      for (let restart = 0; restart < 2; restart++) {
        const ctx = await model.createContext({ ...DISK_ONLY, cacheDir: fs.dir });
        expect(fromDisk(await exact(ctx, good, 20))).toBe(true);
        expect(fromDisk(await exact(ctx, bad, 20))).toBe(false);
        expect(ctx.cacheStats().diskRejected).toBe(1);
        await exact(ctx, { tag: 32, k: 50, len: 40 }); // a new state: its write fails
        expect(fromDisk(await exact(ctx, bad, 20))).toBe(false); // still never restored
        expect(fromDisk(await exact(ctx, good, 20))).toBe(true);
        await ctx.dispose();
        // Nothing could be removed or added.
        expect(states(fs.dir)).toHaveLength(2);
        expect(existsSync(corrupt)).toBe(true);
        expect(temps(fs.dir)).toEqual([]);
      }
    });

    it('refuses a cacheDir it cannot create with INVALID_ARGUMENT naming it', async () => {
      const missing = join(fs.dir, 'not', 'there');
      const e = await model.createContext({ ...DISK_ONLY, cacheDir: missing }).then(() => undefined, (err: unknown) => err);
      if (fs.tmpfs) {
        expect(e).toMatchObject({ code: 'INVALID_ARGUMENT' });
        expect((e as Error).message).toContain(missing);
      }
      // A cacheDir that is a file.
      const file = join(tempDir('disk-file'), 'plain-file');
      writeFileSync(file, 'x');
      await expect(model.createContext({ ...DISK_ONLY, cacheDir: file })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining(file) });
    });
  });

  describe('files that vanish between the index scan and the read', () => {
    it('recomputes when the indexed state files were deleted under a running context', async () => {
      const dir = tempDir('disk-vanish');
      const a: P = { tag: 40, k: 90, len: 50 };
      const b: P = { tag: 41, k: 130, len: 70 };
      await warm(dir, [a, b]);
      expect(states(dir)).toHaveLength(2);
      expect(await indexed(dir)).toBe(2);
      const ctx = await model.createContext({ ...DISK_ONLY, cacheDir: dir }); // indexes both
      await ctx.complete({ prompt: [1, 399], maxTokens: 1 }); // (the index is built by now)
      for (const f of states(dir)) rmSync(f);
      expect(fromDisk(await exact(ctx, a, 20))).toBe(false);
      expect(fromDisk(await exact(ctx, b, 20))).toBe(false);
      const stats = ctx.cacheStats();
      expect(stats.diskRejected).toBe(2);
      expect(stats.diskRestores).toBe(0);
      await ctx.dispose();
    });

    it('keeps answering when the whole cache folder is removed while it runs', async () => {
      const dir = tempDir('disk-rmdir');
      const ps: P[] = [50, 51, 52].map((tag, i) => ({ tag, k: 90 + 40 * i, len: 40 }));
      await warm(dir, ps);
      const ctx = await model.createContext({ ...DISK_ONLY, cacheDir: dir });
      rmSync(dir, { recursive: true, force: true });
      for (let round = 0; round < 2; round++) for (const p of ps) expect(fromDisk(await exact(ctx, p, 16))).toBe(false);
      await ctx.dispose(); // its final saves fail
      // A later context recreates the folder and works.
      const again = await model.createContext({ ...DISK_ONLY, cacheDir: dir });
      await exact(again, ps[0]!);
      await again.dispose();
      expect(existsSync(dir)).toBe(true);
    });

    it('stays exact while another process deletes every state file as fast as it can', async () => {
      const dir = tempDir('disk-race');
      const ps: P[] = [60, 61, 62, 63, 64, 65].map((tag, i) => ({ tag, k: 40 + 40 * i, len: 30 + 4 * i }));
      await warm(dir, ps);
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 2, cacheRamMb: 0, toolCallMarkers: false, cacheDir: dir });
      const deleter = spawn('sh', ['-c', `while :; do rm -f "${dir}"/*/*.lmxkv; sleep 0.01; done`], { stdio: 'ignore' });
      let restores = 0;
      try {
        const order = Array.from({ length: 90 }, (_, i) => ps[(i * 5) % ps.length]!);
        // Waves of 3 on 2 sequences: states are saved, looked up, read and deleted all the time.
        for (let i = 0; i < order.length; i += 3) {
          const wave = order.slice(i, i + 3);
          const results = await Promise.all(wave.map((p) => ctx.complete({ prompt: tokensOf(p), maxTokens: 10, temperature: 0, emitTokenIds: true })));
          results.forEach((r, j) => {
            expect(Array.from(r.tokens!), `request ${i + j}`).toEqual(expectedAt(wave[j]!, 10));
            if (fromDisk(r)) restores++;
          });
        }
        const stats = ctx.cacheStats();
        console.log(`disk race: ${order.length} requests, ${restores} restored from disk, ${stats.diskRejected} files gone when read`);
        expect(stats.diskRejected).toBeGreaterThan(0); // the race was really run
      } finally {
        deleter.kill('SIGKILL');
      }
      await ctx.dispose();
    });

    it('never restores a state file replaced by another valid state after the index scan', async () => {
      // The `demo` model answers turn 2 (a <tool_response> in the prompt) with text, and a prompt
      // without it with a tool call: restoring the wrong KV shows in the output. File B is a
      // valid state of the same model and KV layout, for the same prompt with the flag token
      // replaced; it is copied over A's file after the context indexed A.
      const demo = await loadModel(testModel('demo').path);
      try {
        const d = testModel('demo').description;
        const promptA = [...d.scripts.turn2!.promptTokens];
        const flag = d.tokens['<tool_response>']!;
        const promptB = promptA.map((t) => (t === flag ? d.tokens.user! : t));
        expect(promptB).not.toEqual(promptA);
        const opts: ContextOptions = { ...DISK_ONLY, contextSize: 512 };
        const dirA = tempDir('disk-swap-a');
        const dirB = tempDir('disk-swap-b');
        for (const [dir, p] of [[dirA, promptA], [dirB, promptB]] as const) {
          const c = await demo.createContext({ ...opts, cacheDir: dir });
          await c.prefillOnly(p);
          await c.dispose();
        }
        const [fileA] = states(dirA);
        const [fileB] = states(dirB);
        const ctx = await demo.createContext({ ...opts, cacheDir: dirA }); // indexes A (A's tokens)
        copyFileSync(fileB!, fileA!); // ...then A's file holds B's tokens and KV
        const r = await ctx.complete({ prompt: promptA, temperature: 0, emitTokenIds: true });
        await ctx.dispose();
        expect(Array.from(r.tokens!)).toEqual(d.scripts.turn2!.greedy);
        expect(r.text).toBe(d.scripts.turn2!.greedyText);
      } finally {
        await demo.dispose();
      }
    });
  });
});
