// Benchmark models: generated random-weight GGUFs (cost does not depend on weight values)
// in an ignored folder, plus the shared tiny model with a real tokenizer.
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { writeRandomModel } from '../src/gguf/random.js';

export const benchDir = join(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..', '.cache', 'bench-models');
export const sharedTinyModel = join(benchDir, '..', '..', '..', 'shared', 'models', 'llama-2-tiny-random.gguf');

export type BenchModelName = '250m-q8_0' | '250m-f16' | 'tiny-random' | 'llama2-tiny';

export interface BenchModel {
  name: BenchModelName;
  path: string;
  sizeBytes: number;
  description: string;
}

export async function ensureBenchModel(name: BenchModelName): Promise<BenchModel> {
  mkdirSync(benchDir, { recursive: true });
  if (name === 'llama2-tiny') {
    return { name, path: sharedTinyModel, sizeBytes: statSync(sharedTinyModel).size, description: 'llama-2-tiny-random (1 block, n_embd 8, 1.7 MB)' };
  }
  const path = join(benchDir, `${name}.gguf`);
  const spec = name === 'tiny-random'
    ? { preset: 'tiny' as const, type: 'F16' as const, seed: 3 }
    : { preset: '250m' as const, type: (name === '250m-f16' ? 'F16' : 'Q8_0') as 'F16' | 'Q8_0', seed: 1 };
  if (!existsSync(path)) await writeRandomModel(path, spec);
  const desc = name === 'tiny-random' ? 'random llama, 2 layers, n_embd 128' : `random llama ~258M params (16 layers, n_embd 1024), ${spec.type}`;
  return { name, path, sizeBytes: statSync(path).size, description: desc };
}

/** The same pseudo-random prompt the raw C++ loop uses, so every system decodes identical tokens. */
export function benchPrompt(nTokens: number, nVocab: number, seq = 0): number[] {
  const out: number[] = [];
  for (let i = 0; i < nTokens; i++) {
    const h = (Math.imul(i, 2654435761) + seq * 97) >>> 0;
    out.push(3 + (h % (nVocab - 3)));
  }
  return out;
}
