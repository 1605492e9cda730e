// Mutated GGUF files are loaded in a child process, so a crash is caught as a failure
// instead of taking the test runner down. Every mutation must load or give a typed error.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ensureTestModels } from '../../src/gguf/fixtures.js';
import { Prng } from '../../src/gguf/prng.js';
import { fixturesDir, projectRoot, tempDir, tinyModelPath } from '../helpers/paths.js';

function mutate(src: Buffer, rng: Prng, kind: number): Buffer {
  const b = Buffer.from(src);
  const headerEnd = Math.min(b.length, 4096);
  const at = (limit: number) => Math.floor(rng.next() * limit);
  switch (kind % 5) {
    case 0: // flip bits in the header / metadata region
      for (let i = 0; i < 1 + at(8); i++) b[at(headerEnd)] ^= 1 << at(8);
      return b;
    case 1: // overwrite a run of header bytes with random data
      for (let i = 0, p = at(headerEnd); i < 16 && p + i < b.length; i++) b[p + i] = at(256);
      return b;
    case 2: // truncate anywhere
      return b.subarray(0, at(b.length));
    case 3: // blow up a 64-bit length or count field (little-endian u64 after the magic)
      b.writeBigUInt64LE(BigInt(at(2 ** 31)) * 4096n, 8 + 8 * at(2));
      return b;
    default: // random bytes anywhere in the file
      for (let i = 0; i < 32; i++) b[at(b.length)] = at(256);
      return b;
  }
}

describe('loading mutated GGUF files', () => {
  it('never crashes: each of 120 mutations loads or gives MODEL_INVALID', { timeout: 240_000 }, async () => {
    const models = await ensureTestModels(join(fixturesDir, 'fuzz'), ['near-tie']);
    const sources = [readFileSync(models['near-tie']!.path), readFileSync(tinyModelPath)];
    const dir = tempDir('load-fuzz');
    const rng = new Prng(20261125);
    const files: string[] = [];
    for (let i = 0; i < 120; i++) {
      const f = join(dir, `m${i}.gguf`);
      writeFileSync(f, mutate(sources[i % 2]!, rng, i));
      files.push(f);
    }
    const script = `
      import { loadModel, setLogger } from ${JSON.stringify(join(projectRoot, 'src', 'index.ts'))};
      setLogger('silent');
      const files = ${JSON.stringify(files)};
      for (const f of files) {
        process.stdout.write('try ' + f + '\\n');
        try {
          const m = await loadModel(f);
          const c = await m.createContext({ contextSize: 256 });
          await c.complete({ prompt: 'x', maxTokens: 2, temperature: 0 });
          await m.dispose();
          process.stdout.write('ok ' + f + '\\n');
        } catch (e) {
          process.stdout.write('err ' + (e.code ?? 'NONE') + ' ' + f + '\\n');
        }
      }
      process.stdout.write('done\\n');
    `;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: projectRoot, encoding: 'utf8', timeout: 200_000 });
    const lines = r.stdout.trim().split('\n');
    const lastTry = lines.filter((l) => l.startsWith('try ')).at(-1);
    expect({ status: r.status, signal: r.signal, crashedOn: lines.at(-1) === 'done' ? null : lastTry, stderr: r.stderr.slice(-500) })
      .toEqual({ status: 0, signal: null, crashedOn: null, stderr: expect.any(String) });
    const outcomes = lines.filter((l) => l.startsWith('ok ') || l.startsWith('err '));
    expect(outcomes).toHaveLength(files.length);
    for (const o of outcomes) expect(o).toMatch(/^(ok |err (MODEL_INVALID|CONTEXT_CREATE_FAILED|INVALID_ARGUMENT) )/);
    // the mutations really exercise both paths
    expect(outcomes.filter((o) => o.startsWith('err MODEL_INVALID')).length).toBeGreaterThan(30);
    expect(outcomes.filter((o) => o.startsWith('ok ')).length).toBeGreaterThan(5);
  });
});
