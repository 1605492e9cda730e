// Issue 26 on the model families of issue 24: hybrid recurrent (Gated DeltaNet, Mamba-2, short
// convolutions), sliding-window and mixture-of-experts zoo models (Q8_0) through every cache path
// (test/determinism/cache-paths.ts): deterministic must be bit-identical; default mode runs on
// one hybrid and one sliding-window model and reports what it saw (8 concurrent sequences,
// preemption, shared prefixes and forks change logits there by up to ~0.1).
import { beforeAll } from 'vitest';
import type { ZooArchitecture, ZooModelDescription } from '../../src/gguf/index.js';
import { zooModels } from '../helpers/zoo.js';
import { describeCachePaths } from './cache-paths.js';

const ARCHS: ZooArchitecture[] = ['qwen35', 'qwen35moe', 'granitehybrid', 'lfm2', 'gemma4', 'gpt-oss'];
let zoo: Record<ZooArchitecture, ZooModelDescription>;

beforeAll(async () => {
  zoo = await zooModels(ARCHS, 'Q8_0');
}, 300_000);

const WITH_DEFAULT = new Set<ZooArchitecture>(['qwen35', 'gemma4']);
for (const arch of ARCHS) describeCachePaths(arch, () => zoo[arch].path, WITH_DEFAULT.has(arch) ? [true, false] : [true], 240_000);
