// Issue 26: `deterministic: true` keeps the logits of every position bit-identical on every cache
// path (test/determinism/cache-paths.ts), here on a random llama of the 250 M model's structure
// (same tensor types, Q8_0, same kernels: llamafile sgemm, flash attention) at the 'tiny' shape
// (2 layers, n_embd 128), in both modes. paths-250m.test.ts runs the 250 M model itself,
// paths-zoo.test.ts the hybrid, sliding-window and MoE architectures.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { writeRandomModel } from '../../src/gguf/random.js';
import { describeCachePaths } from './cache-paths.js';

let dir: string;
let modelPath: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'llamux-det-'));
  modelPath = join(dir, 'tiny-q8_0.gguf');
  await writeRandomModel(modelPath, { preset: 'tiny', type: 'Q8_0', seed: 7 });
}, 60_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describeCachePaths('tiny Q8_0', () => modelPath, [true, false]);
