import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../src/binding.js';

export function tempDirFor(name: string): string {
  const dir = join(packageRoot, '.cache', 'bench-tmp', `${name}-${process.pid}-${Date.now()}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}
