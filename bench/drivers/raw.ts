// The raw C++ decode loop (bench/native/raw_decode.cc) over the same static llama.cpp.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/binding.js';

export interface RawResult {
  prefillTokensPerSec: number;
  decodeTokensPerSec: number;
}

export function rawBinary(): string {
  const bin = join(packageRoot, 'build', 'raw-decode');
  if (!existsSync(bin)) {
    execFileSync(process.execPath, [join(packageRoot, 'scripts', 'build-native.mjs')], {
      env: { ...process.env, LLAMUX_BUILD_BENCH: '1' },
      stdio: 'ignore',
    });
  }
  return bin;
}

export function runRaw(model: string, promptTokens: number, genTokens: number, threads: number, sequences = 1): RawResult {
  const out = execFileSync(rawBinary(), [model, String(promptTokens), String(genTokens), String(threads), String(sequences)], { encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').at(-1)!) as RawResult;
}
