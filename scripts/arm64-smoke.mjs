#!/usr/bin/env node
// Load test for the linux-arm64 cross build (scripts/cross-arm64.mjs), run by an arm64 Node
// (under qemu-user on an x64 machine: docs/deploy.md): loads build-arm64/Release/llamux.node
// through the public API (dist/), prints which CPU backend ggml chose, loads a GGUF and
// generates a few tokens greedily, twice, and fails unless both runs give the same tokens.
//
//   node scripts/arm64-smoke.mjs <model.gguf> [addon folder]
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const [modelPath, addonDir = join(root, 'build-arm64', 'Release')] = process.argv.slice(2);
if (!modelPath) {
  console.error('usage: node scripts/arm64-smoke.mjs <model.gguf> [addon folder]');
  process.exit(2);
}
process.env.LLAMUX_NATIVE_PATH = join(resolve(addonDir), 'llamux.node');

const t0 = Date.now();
const since = () => `${((Date.now() - t0) / 1000).toFixed(1)} s`;
const { describeSystem, loadModel, systemInfo } = await import(join(root, 'dist', 'index.js'));
console.log(`node ${process.version} ${process.platform}-${process.arch}, Node-API ${process.versions.napi}`);
const info = systemInfo();
console.log(`addon loaded (${since()}): ${describeSystem(info)}`);
console.log(`CPU variants built (ggml score here): ${info.cpuVariants.map((v) => `${v.name}:${v.score}`).join(' ')}`);

const model = await loadModel(modelPath);
console.log(`model loaded (${since()})`);
const ctx = await model.createContext({ contextSize: 256, sequences: 1 });
const runs = [];
for (let i = 0; i < 2; i++) {
  const result = await ctx.generate({ prompt: 'Once upon a time', maxTokens: 8, temperature: 0, emitTokenIds: true }).result;
  runs.push(result);
  console.log(`run ${i + 1} (${since()}): ${JSON.stringify(result.text)} tokens=${JSON.stringify(Array.from(result.tokens ?? []))} finish=${result.finishReason} (${result.generatedTokens} generated)`);
}
await model.dispose();
const ids = runs.map((r) => JSON.stringify(Array.from(r.tokens ?? [])));
if (runs[0].generatedTokens !== 8 || ids[0] !== ids[1]) {
  console.error('expected the same 8 tokens from both greedy runs');
  process.exit(1);
}
console.log(`ok (${since()})`);
