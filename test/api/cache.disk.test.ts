import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureTestModels } from '../../src/gguf/fixtures.js';
import { loadModel, type Model } from '../../src/index.js';
import { fixturesDir, projectRoot, tempDir } from '../helpers/paths.js';

function stateFiles(dir: string): string[] {
  const out: string[] = [];
  for (const sub of readdirSync(dir, { withFileTypes: true })) {
    if (!sub.isDirectory()) continue;
    for (const f of readdirSync(join(dir, sub.name))) out.push(join(dir, sub.name, f));
  }
  return out;
}

describe('disk tier', () => {
  let modelPath: string;
  let prompt: number[];
  let greedy: number[];
  let model: Model;

  beforeAll(async () => {
    const models = await ensureTestModels(join(fixturesDir, 'disk-tier'), ['long-script']);
    const m = models['long-script']!;
    modelPath = m.path;
    const script = Object.values(m.description.scripts)[0]!;
    // a long prompt: the script's prompt followed by the first 120 scripted tokens
    prompt = [...script.promptTokens, ...script.greedy.slice(0, 120)];
    greedy = script.greedy.slice(120, 140);
    model = await loadModel(modelPath);
  });
  afterAll(async () => {
    await model.dispose();
  });

  async function warm(dir: string, tokens = prompt): Promise<void> {
    const ctx = await model.createContext({ contextSize: 1024, cacheDir: dir, cacheRamMb: 0 });
    await ctx.prefillOnly(tokens);
    await ctx.dispose(); // waits for queued writes
  }

  async function run(dir: string) {
    const ctx = await model.createContext({ contextSize: 1024, cacheDir: dir });
    const r = await ctx.complete({ prompt, maxTokens: 20, temperature: 0, emitTokenIds: true });
    const stats = ctx.cacheStats();
    await ctx.dispose();
    return { r, stats };
  }

  it('survives a restart: a new context finds the warmed prefix on disk and the output is unchanged', async () => {
    const dir = tempDir('disk-restart');
    await warm(dir);
    const files = stateFiles(dir).filter((f) => f.endsWith('.lmxkv'));
    expect(files).toHaveLength(1);
    const { r, stats } = await run(dir);
    expect(r.cache).toMatchObject({ outcome: 'restored', tier: 'disk' });
    expect(r.reusedTokens).toBe(prompt.length - 1);
    expect(Array.from(r.tokens!)).toEqual(greedy);
    expect(stats.diskRestores).toBe(1);
    expect(stats.diskEntries).toBe(1);
    expect(stats.diskBytes).toBeLessThanOrEqual(stats.diskBudget);
  });

  it('ignores and removes a corrupted file; the answer is still right', async () => {
    const dir = tempDir('disk-corrupt');
    await warm(dir);
    const file = stateFiles(dir).find((f) => f.endsWith('.lmxkv'))!;
    const bytes = readFileSync(file);
    bytes[bytes.length - 10] ^= 0xff; // inside the blob: the checksum catches it
    writeFileSync(file, bytes);
    const { r, stats } = await run(dir);
    expect(r.cache.outcome).toBe('cold');
    expect(Array.from(r.tokens!)).toEqual(greedy);
    expect(stats.diskRejected).toBe(1);
    expect(existsSync(file)).toBe(false);
  });

  it('ignores and removes a truncated file', async () => {
    const dir = tempDir('disk-trunc');
    await warm(dir);
    const file = stateFiles(dir).find((f) => f.endsWith('.lmxkv'))!;
    truncateSync(file, 100);
    const { r, stats } = await run(dir);
    expect(r.cache.outcome).toBe('cold');
    expect(Array.from(r.tokens!)).toEqual(greedy);
    expect(stats.diskRejected).toBe(1);
    expect(existsSync(file)).toBe(false);
  });

  it('ignores and removes a file made for another model', async () => {
    const dir = tempDir('disk-foreign');
    const other = tempDir('disk-other');
    await warm(dir);
    // the same prefix on another model (tiny Llama 2) lands in its own folder
    const llama2 = await loadModel(join(projectRoot, '..', 'shared', 'models', 'llama-2-tiny-random.gguf'));
    const octx = await llama2.createContext({ contextSize: 1024, cacheDir: other, cacheRamMb: 0 });
    await octx.prefillOnly(llama2.tokenize('alpha beta gamma delta '.repeat(8)));
    await octx.dispose();
    await llama2.dispose();
    const foreign = stateFiles(other).find((f) => f.endsWith('.lmxkv'))!;
    const mine = stateFiles(dir).find((f) => f.endsWith('.lmxkv'))!;
    const planted = join(mine, '..', 'planted.lmxkv');
    copyFileSync(foreign, planted);
    const { r, stats } = await run(dir);
    expect(stats.diskRejected).toBe(1);
    expect(stateFiles(dir)).not.toContain(planted);
    expect(r.cache).toMatchObject({ outcome: 'restored', tier: 'disk' }); // its own file is still used
    expect(Array.from(r.tokens!)).toEqual(greedy);
  });

  it('a process killed mid-write leaves nothing that is read back as valid', async () => {
    const dir = tempDir('disk-kill');
    const script = `
      import { loadModel, setLogger } from ${JSON.stringify(join(projectRoot, 'src', 'index.ts'))};
      setLogger('silent');
      const model = await loadModel(${JSON.stringify(modelPath)});
      const ctx = await model.createContext({ contextSize: 1024, cacheDir: ${JSON.stringify(dir)}, cacheRamMb: 0 });
      const base = ${JSON.stringify(prompt)};
      console.log('ready');
      for (let i = 0; ; i++) await ctx.prefillOnly([...base.slice(0, 40 + (i % 80)), ...base.slice(0, 20)]);
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: projectRoot, stdio: ['ignore', 'pipe', 'pipe'] });
    await new Promise<void>((resolve) => child.stdout.on('data', (d) => { if (String(d).includes('ready')) resolve(); }));
    await new Promise((r) => setTimeout(r, 400));
    child.kill('SIGKILL');
    await new Promise((r) => child.on('exit', r));
    const { r, stats } = await run(dir);
    expect(stats.diskRejected).toBe(0); // every complete file verified
    expect(stateFiles(dir).some((f) => f.includes('.tmp-'))).toBe(false); // unfinished writes removed
    expect(Array.from(r.tokens!)).toEqual(greedy);
  });

  it('dispose() saves what the sequences hold, so a restarted process continues warm', async () => {
    const dir = tempDir('disk-close');
    const first = await run(dir); // cold; its sequence is written when the context closes
    expect(first.r.cache.outcome).toBe('cold');
    const again = await run(dir);
    expect(again.r.cache).toMatchObject({ outcome: 'restored', tier: 'disk' });
    expect(Array.from(again.r.tokens!)).toEqual(greedy);
  });

  it('write-through: a conversation survives kill -9, and the restarted context counts the loaded entries before any request', async () => {
    const dir = tempDir('disk-writethrough');
    const turn1 = prompt.slice(0, 100);
    // Turn 1 in a child process, which is killed (no dispose, no close-time save) as soon as
    // its state file is on disk.
    const script = `
      import { loadModel, setLogger } from ${JSON.stringify(join(projectRoot, 'src', 'index.ts'))};
      setLogger('silent');
      const model = await loadModel(${JSON.stringify(modelPath)});
      const ctx = await model.createContext({ contextSize: 1024, cacheDir: ${JSON.stringify(dir)}, cacheRamMb: 0 });
      await ctx.complete({ prompt: ${JSON.stringify(turn1)}, maxTokens: 8, temperature: 0 });
      console.log('done');
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: projectRoot, stdio: ['ignore', 'pipe', 'pipe'] });
    await new Promise<void>((resolve) => child.stdout.on('data', (d) => { if (String(d).includes('done')) resolve(); }));
    const deadline = Date.now() + 10_000;
    while (stateFiles(dir).filter((f) => f.endsWith('.lmxkv')).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    child.kill('SIGKILL');
    await new Promise((r) => child.on('exit', r));
    expect(stateFiles(dir).filter((f) => f.endsWith('.lmxkv'))).toHaveLength(1);

    const ctx = await model.createContext({ contextSize: 1024, cacheDir: dir });
    expect(ctx.cacheStats().diskEntries).toBe(1); // loaded at start, reported before any request
    // Turn 2: turn 1's prompt and its 8 generated tokens, then more.
    const r = await ctx.complete({ prompt, maxTokens: 20, temperature: 0, emitTokenIds: true });
    expect(r.cache).toMatchObject({ outcome: 'restored', tier: 'disk' });
    expect(r.reusedTokens).toBe(turn1.length + 8 - 1); // the last generated token was never fed
    expect(Array.from(r.tokens!)).toEqual(greedy);
    await ctx.dispose();
  });

  it('cacheWriteThrough: false writes nothing while the context runs', async () => {
    const dir = tempDir('disk-no-writethrough');
    const ctx = await model.createContext({ contextSize: 1024, cacheDir: dir, cacheRamMb: 0, cacheWriteThrough: false });
    await ctx.complete({ prompt: prompt.slice(0, 100), maxTokens: 8, temperature: 0 });
    await new Promise((r) => setTimeout(r, 300));
    expect(stateFiles(dir).filter((f) => f.endsWith('.lmxkv'))).toHaveLength(0);
    await ctx.dispose();
  });

  it('keeps the disk tier within its byte budget (LRU)', async () => {
    const dir = tempDir('disk-budget');
    const ctx = await model.createContext({ contextSize: 1024, cacheDir: dir, cacheRamMb: 0, cacheDiskMb: 0.05 });
    const budget = ctx.cacheStats().diskBudget;
    for (let i = 0; i < 12; i++) {
      await ctx.prefillOnly(prompt.slice(0, 30 + i * 7));
      await ctx.complete({ prompt: prompt.slice(0, 5), maxTokens: 1 }); // lets the engine pick up finished writes
      expect(ctx.cacheStats().diskBytes).toBeLessThanOrEqual(budget);
    }
    expect(ctx.cacheStats().diskEntries).toBeGreaterThan(0);
    await ctx.dispose();
  });
});
