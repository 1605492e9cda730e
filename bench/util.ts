import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../src/native/binding.js';

export function tempDirFor(name: string): string {
  const dir = join(packageRoot, '.cache', 'bench-tmp', `${name}-${process.pid}-${Date.now()}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** node-llama-cpp is a devDependency: a machine that has only llamux's build (a lent GPU or
 * AMX machine the bench was carried to) sets LLAMUX_BENCH_NO_NLC=1 and its rows are left out. */
export const runNodeLlamaCpp = process.env.LLAMUX_BENCH_NO_NLC !== '1';
