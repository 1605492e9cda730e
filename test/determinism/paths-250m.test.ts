// Issue 26 on the 250 M random Q8_0 model (16 layers, n_embd 1024: the bench model, whose batch
// shapes take llamafile's sgemm and the tiled flash attention in default mode) through every
// cache path (test/determinism/cache-paths.ts), deterministic mode only: the tiny-shape run in
// paths.test.ts shows default mode's deviations, and this model takes ~2 minutes on 2 cores.
import { beforeAll } from 'vitest';
import { ensureBenchModel } from '../../bench/models.js';
import { describeCachePaths } from './cache-paths.js';

let modelPath: string;

beforeAll(async () => {
  modelPath = (await ensureBenchModel('250m-q8_0')).path;
}, 600_000);

describeCachePaths('250m Q8_0', () => modelPath, [true], 600_000);
