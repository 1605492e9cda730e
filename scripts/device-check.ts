// The GPU half of scripts/device-check.sh (run with node --import tsx after a GPU build):
// load a model with gpuLayers 'auto', generate, decode against the raw C++ loop over the same
// libraries, and throughput against llama-server built from the same llama.cpp source.
// Prints one JSON summary line last; exits 1 when a check fails.
//
//   node --import tsx scripts/device-check.ts [--model PATH] [--llama-server BIN] [--quick] [--no-raw]
// (--no-raw skips the raw-loop comparison: a dry run of the script on a CPU-only checkout.)
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ensureBenchModel, benchPrompt } from '../bench/models.js';
import { llamuxConcurrent, llamuxSingle } from '../bench/drivers/llamux.js';
import { rawBinary, runRaw } from '../bench/drivers/raw.js';
import { startLlamaServer, streamTokenCompletion } from '../bench/drivers/llama-server.js';
import { describePlan } from '../src/model/fit.js';
import { describeSystem, loadModel, planForFile, setLogger, systemInfo } from '../src/index.js';
import { zooGreedyChain, type ZooModelDescription } from '../src/gguf/index.js';

const { values } = parseArgs({
  options: { model: { type: 'string' }, 'llama-server': { type: 'string' }, quick: { type: 'boolean' }, 'no-raw': { type: 'boolean' }, threads: { type: 'string' } },
});
const quick = values.quick ?? false;
const threads = Number(values.threads ?? 4);
const prompt = 128;
const gen = quick ? 64 : 256;
const failures: string[] = [];
const summary: Record<string, unknown> = {};
const check = (ok: boolean, what: string): void => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures.push(what);
};

// Warnings, and llama.cpp's buffer sizes (to compare with the plan's estimates per device).
setLogger('info', (level, m) => {
  if (level !== 'info' || /buffer size|offloaded \d+\/\d+ layers/.test(m)) console.log(`[${level}] ${m.trimEnd()}`);
});
const info = systemInfo();
console.log(describeSystem(info));
for (const d of info.devices) console.log(`device ${d.name} (${d.type}) ${Math.round(d.memoryFree / 2 ** 20)} MiB free of ${Math.round(d.memoryTotal / 2 ** 20)}: ${d.description}`);
const gpus = info.devices.filter((d) => d.type === 'gpu' || d.type === 'igpu');
check(gpus.length > 0, `llama.cpp sees a GPU (backends: ${info.loadedBackends.join(' ')})`);
summary.devices = info.devices.map((d) => ({ name: d.name, type: d.type, freeMiB: Math.round(d.memoryFree / 2 ** 20) }));

const path = values.model ?? (await ensureBenchModel('250m-q8_0')).path;
console.log(`model ${path}`);

// 1. the plan, and a load with it
const plan = await planForFile(path, { contextSize: 8192, sequences: 8 });
for (const line of plan ? describePlan(plan) : ['no plan (GGUF header unreadable)']) console.log(line);
const model = await loadModel(path);
check(model.fit !== undefined && model.fit.mode === 'gpu' && model.fit.gpuLayers === model.fit.totalLayers, `'auto' offloads every layer (${model.fit?.gpuLayers}/${model.fit?.totalLayers}, mode ${model.fit?.mode})`);
for (const d of model.fit?.devices ?? []) console.log(`plan estimate ${d.name}: ${d.layers} layers, ${(d.bytes / 2 ** 20).toFixed(1)} MiB (compare with llama.cpp's buffer sizes printed here)`);
summary.plan = model.fit && { mode: model.fit.mode, gpuLayers: model.fit.gpuLayers, totalLayers: model.fit.totalLayers, contextSize: model.fit.contextSize };

try {
  // 2. generate: greedy twice gives the same tokens
  const ctx = await model.createContext({ contextSize: 2048, threads, batchThreads: threads });
  const a = await ctx.complete({ prompt: benchPrompt(32, model.vocab.size, 7), maxTokens: 32, temperature: 0, emitTokenIds: true });
  const b = await ctx.complete({ prompt: benchPrompt(32, model.vocab.size, 7), maxTokens: 32, temperature: 0, emitTokenIds: true });
  await ctx.dispose();
  check(a.tokens !== undefined && a.tokens.length > 0, `generate: ${a.tokens?.length ?? 0} tokens`);
  check(JSON.stringify(a.tokens) === JSON.stringify(b.tokens), 'greedy generation repeats (cache hit vs cold)');

  // 3. decode vs the raw loop on the same libraries, 1 and 8 sequences
  const l1 = await llamuxSingle(model, prompt, gen, threads);
  const l8 = await llamuxConcurrent(model, 8, prompt, gen, threads);
  const raw = values['no-raw'] ? undefined : rawBinary();
  const r1 = raw ? runRaw(path, prompt, gen, threads, 1, 'llamux', raw) : { decodeTokensPerSec: NaN };
  const r8 = raw ? runRaw(path, prompt, gen, threads, 8, 'llamux', raw) : { decodeTokensPerSec: NaN };
  const ratio1 = l1.decodeTokensPerSec / r1.decodeTokensPerSec;
  const ratio8 = l8.aggregateDecodeTokensPerSec / r8.decodeTokensPerSec;
  const vsRaw = (r: number, x: number): string => (raw ? `, raw ${r.toFixed(1)} (${x.toFixed(2)}x)` : '');
  console.log(`decode 1 seq: llamux ${l1.decodeTokensPerSec.toFixed(1)} tok/s${vsRaw(r1.decodeTokensPerSec, ratio1)}`);
  console.log(`decode 8 seq: llamux ${l8.aggregateDecodeTokensPerSec.toFixed(1)} tok/s${vsRaw(r8.decodeTokensPerSec, ratio8)}`);
  if (raw) {
    check(ratio1 >= 0.85, `decode at 1 sequence within 15 % of the raw loop (${ratio1.toFixed(2)}x)`);
    check(ratio8 >= 0.85, `decode at 8 sequences within 15 % of the raw loop (${ratio8.toFixed(2)}x)`);
  }
  summary.decode = { llamux1: l1.decodeTokensPerSec, raw1: r1.decodeTokensPerSec, llamux8: l8.aggregateDecodeTokensPerSec, raw8: r8.decodeTokensPerSec, ratio1, ratio8 };

  // 4. throughput vs llama-server (same llama.cpp source, GPU build), 8 concurrent streams
  const bin = values['llama-server'];
  if (bin) {
    const server = await startLlamaServer(bin, path, { ctx: (prompt + gen + 16) * 8, parallel: 8, threads });
    try {
      await streamTokenCompletion(server.openai, benchPrompt(8, model.vocab.size, 99), 4, { ignore_eos: true });
      const t0 = performance.now();
      const runs = await Promise.all(Array.from({ length: 8 }, (_, s) => streamTokenCompletion(server.openai, benchPrompt(prompt, model.vocab.size, s + 1), gen, { ignore_eos: true }, t0)));
      const firstAll = Math.max(...runs.map((r) => r.ttftMs));
      const end = Math.max(...runs.map((r) => r.totalMs));
      const tps = (8 * (gen - 1)) / ((end - firstAll) / 1000);
      const ratio = l8.aggregateDecodeTokensPerSec / tps;
      console.log(`throughput 8 streams: llamux ${l8.aggregateDecodeTokensPerSec.toFixed(1)} tok/s, llama-server ${tps.toFixed(1)} (${ratio.toFixed(2)}x)`);
      check(ratio >= 0.9, `throughput at 8 streams at least 0.9x llama-server (${ratio.toFixed(2)}x)`);
      summary.server = { llamaServer8: tps, ratio };
    } finally {
      await server.close();
    }
  } else {
    console.log('skip llama-server comparison (no --llama-server BIN)');
  }
} finally {
  await model.dispose();
}

// 5. doctor through the CLI, as a user runs it
const doctor = execFileSync(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '..', 'src', 'cli.ts'), 'doctor', '--model', path, '--ctx', '8192'], { encoding: 'utf8' });
console.log(doctor.trimEnd());
check(/plan: all on the GPU/.test(doctor), 'llamux doctor plans all on the GPU');

// 6. MoE experts in system RAM (cpuMoe) on the GPU: the zoo's qwen35moe (generated by the tests
// into .cache/zoo; skipped without it), every layer offloaded, with and without cpuMoe
const zooDir = join(import.meta.dirname, '..', '.cache', 'zoo');
const moeJson = existsSync(zooDir) ? readdirSync(zooDir).find((f) => /^qwen35moe-[0-9a-f]+\.json$/.test(f)) : undefined;
if (moeJson) {
  const d = JSON.parse(readFileSync(join(zooDir, moeJson), 'utf8')) as ZooModelDescription;
  const want = zooGreedyChain(d.successors, d.successors.set[2]!, 8);
  const gpuName = gpus[0]?.name ?? 'none';
  for (const cpuMoe of [false, true]) {
    const m = await loadModel(d.path, { gpuLayers: -1, cpuMoe });
    try {
      const expert = /^blk\.\d+\.ffn_(up|down|gate)_exps\./;
      const t = m.placement().tensors;
      const experts = t.filter((x) => expert.test(x.name));
      check(experts.length > 0 && experts.every((x) => x.device === (cpuMoe ? 'CPU' : gpuName)), `MoE cpuMoe ${cpuMoe}: every expert tensor on ${cpuMoe ? 'CPU' : gpuName}`);
      const attn = t.filter((x) => /^blk\.\d+\.attn_/.test(x.name));
      check(attn.length > 0 && attn.every((x) => x.device === gpuName), `MoE cpuMoe ${cpuMoe}: attention weights on ${gpuName}`);
      console.log(`MoE cpuMoe ${cpuMoe}: bytes per place ${JSON.stringify(m.placement().devices)}`);
      const ctx = await m.createContext({ contextSize: 512, threads, batchThreads: threads, toolCallMarkers: false });
      const r = await ctx.complete({ prompt: d.successors.set.slice(0, 3), maxTokens: 8, temperature: 0, emitTokenIds: true });
      await ctx.dispose();
      check(JSON.stringify(Array.from(r.tokens ?? [])) === JSON.stringify(want), `MoE cpuMoe ${cpuMoe}: greedy output is the zoo chain`);
    } finally {
      await m.dispose();
    }
  }
} else {
  console.log('skip MoE placement check (no .cache/zoo/qwen35moe-*.json: run test/api/fit-moe.test.ts once)');
}

summary.failures = failures;
console.log(JSON.stringify(summary));
process.exitCode = failures.length ? 1 : 0;
