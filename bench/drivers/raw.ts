// The raw C++ decode loop (bench/native/raw_decode.cc) over the same llama.cpp build and the
// same CPU backend variant as llamux (LLAMUX_CPU_VARIANT applies to both).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { packageRoot } from '../../src/native/binding.js';

export interface RawResult {
  prefillTokensPerSec: number;
  decodeTokensPerSec: number;
}

/** 'plain': llama_sampler_sample with a greedy chain (the true limit); 'llamux': full-vocab
 * candidates + logit bias + greedy, the work llamux's sampler does per token. */
export type RawSampler = 'plain' | 'llamux';

export function rawBinary(): string {
  // variants build: next to the shared libraries; native build: the build root
  const candidates = [join(packageRoot, 'build', 'Release', 'raw-decode'), join(packageRoot, 'build', 'raw-decode')];
  let bin = candidates.find((c) => existsSync(c));
  if (!bin) {
    execFileSync(process.execPath, [join(packageRoot, 'scripts', 'build-native.mjs')], {
      env: { ...process.env, LLAMUX_BUILD_BENCH: '1' },
      stdio: 'ignore',
    });
    bin = candidates.find((c) => existsSync(c));
    if (!bin) throw new Error('bench/native/raw_decode.cc did not build');
  }
  return bin;
}

/** The same loop linked against node-llama-cpp's prebuilt libllama/libggml (built with the
 * bench build when node-llama-cpp's linux-x64 binaries are installed); undefined otherwise. */
export function rawNlcBinary(): string | undefined {
  const bin = join(dirname(rawBinary()), 'raw-decode-nlc');
  return existsSync(bin) ? bin : undefined;
}

export function runRaw(model: string, promptTokens: number, genTokens: number, threads: number, sequences = 1, sampler: RawSampler = 'llamux', binary = rawBinary()): RawResult {
  const out = execFileSync(binary, [model, String(promptTokens), String(genTokens), String(threads), String(sequences), sampler], { encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').at(-1)!) as RawResult;
}

/** Median time of one decode of a `suffix`-token batch over a `promptTokens` KV, over `repeats`. */
export function runRawSuffix(model: string, promptTokens: number, suffix: number, repeats: number, threads: number): { medianMs: number; minMs: number; maxMs: number } {
  const out = execFileSync(rawBinary(), [model, String(promptTokens), String(repeats), String(threads), '1', 'plain', String(suffix)], { encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').at(-1)!) as { medianMs: number; minMs: number; maxMs: number };
}
