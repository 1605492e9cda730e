import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot, tempDir, tinyModelPath } from '../helpers/paths.js';

const index = JSON.stringify(join(projectRoot, 'src', 'index.ts'));
const model = JSON.stringify(tinyModelPath);

function runChild(script: string, args: string[] = []): string {
  return execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', ...args, '-e', script], {
    cwd: projectRoot,
    encoding: 'utf8',
    timeout: 60_000,
  });
}

describe('lifetime', () => {
  it('a process exits on its own with a model and an idle context left open', () => {
    const out = runChild(`
      import { loadModel } from ${index};
      const m = await loadModel(${model});
      const c = await m.createContext({ contextSize: 256 });
      const r = await c.complete({ prompt: 'hi', maxTokens: 3, temperature: 0 });
      console.log('generated', r.generatedTokens);
    `);
    expect(out).toMatch(/generated \d/);
  });

  it('process.exit() with a generation running does not crash', () => {
    const out = runChild(`
      import { loadModel } from ${index};
      const m = await loadModel(${model});
      const c = await m.createContext({ contextSize: 2048 });
      const bias = Object.fromEntries(m.vocab.eogTokens.map((t) => [t, -Infinity]));
      const g = c.generate({ prompt: 'hi', maxTokens: 100000, logitBias: bias });
      for await (const ev of g) { if (ev.type === 'text') { console.log('streaming'); process.exit(0); } }
    `);
    expect(out).toContain('streaming');
  });

  it('loads models and generates in worker threads alongside the main thread', () => {
    const workerFile = join(tempDir('worker'), 'worker.mjs');
    // Workers do not inherit tsx's loader hooks: register them in the worker itself.
    writeFileSync(workerFile, `
      import { parentPort } from 'node:worker_threads';
      import { register } from 'tsx/esm/api';
      register();
      const { loadModel } = await import(${index});
      const m = await loadModel(${model});
      const c = await m.createContext({ contextSize: 256 });
      const r = await c.complete({ prompt: 'worker', maxTokens: 4, temperature: 0 });
      await m.dispose();
      parentPort.postMessage(r.generatedTokens);
    `);
    const out = runChild(`
      import { Worker } from 'node:worker_threads';
      import { loadModel } from ${index};
      const results = await Promise.all([0, 1].map(() => new Promise((resolve, reject) => {
        const w = new Worker(${JSON.stringify(workerFile)}, { execArgv: [] });
        w.on('message', resolve); w.on('error', reject);
      })));
      const m = await loadModel(${model});
      const c = await m.createContext({ contextSize: 256 });
      const r = await c.complete({ prompt: 'main', maxTokens: 4, temperature: 0 });
      console.log(JSON.stringify({ workers: results, main: r.generatedTokens }));
    `);
    const res = JSON.parse(out.trim().split('\n').at(-1)!);
    expect(res.workers.length).toBe(2);
    expect(res.main).toBeGreaterThan(0);
  });

  it('a context dropped without dispose() is collected or kept without crashing under --expose-gc', () => {
    const out = runChild(`
      import { loadModel } from ${index};
      const m = await loadModel(${model});
      for (let i = 0; i < 5; i++) {
        const c = await m.createContext({ contextSize: 256 });
        await c.complete({ prompt: 'x', maxTokens: 2 });
      }
      globalThis.gc(); await new Promise((r) => setTimeout(r, 50)); globalThis.gc();
      console.log('ok');
    `, ['--expose-gc']);
    expect(out).toContain('ok');
  });

  it('a dropped, undisposed idle context is collected and its engine thread stops', () => {
    const out = runChild(`
      import { loadModel } from ${index};
      const m = await loadModel(${model});
      let collected = 0;
      const registry = new FinalizationRegistry(() => { collected++; });
      async function useAndDrop(i) {
        const c = await m.createContext({ contextSize: 256 });
        const r = await c.complete({ prompt: 'x', maxTokens: 2 });
        registry.register(c, i);
        if (r.generatedTokens < 1) throw new Error('no output');
      }
      for (let i = 0; i < 3; i++) await useAndDrop(i);
      // A busy context is not collected: it still delivers its result.
      const busy = (await m.createContext({ contextSize: 256 })).generate({ prompt: 'y', maxTokens: 4 });
      for (let i = 0; i < 20 && collected < 3; i++) {
        globalThis.gc();
        await new Promise((r) => setTimeout(r, 20));
      }
      const late = await busy.result;
      console.log(JSON.stringify({ collected, late: late.generatedTokens }));
      await m.dispose();
    `, ['--expose-gc']);
    const res = JSON.parse(out.trim().split('\n').at(-1)!);
    expect(res.collected).toBe(3);
    expect(res.late).toBeGreaterThan(0);
  });
});
