// Runs every script of the scripted models greedily and prints one JSON line: the tokens per
// script, the devices, the GPU packages and llama.cpp's offload lines. Run in a child process by
// lavapipe.vulkan-test.ts, once on the CPU and once with the Vulkan backend, so each run loads
// exactly one set of backends. Usage: node --import tsx greedy-run.ts FIXTURES_DIR GPU_LAYERS
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadModel, setLogger, systemInfo } from '../../src/index.js';
import type { ScriptedModelDescription } from '../../src/gguf/scripted.js';

const [dir, layers] = process.argv.slice(2) as [string, string];
const logs: string[] = [];
setLogger('info', (_level, message) => {
  if (/offload|Vulkan|ggml_vulkan/i.test(message)) logs.push(message.trim());
});
const info = systemInfo();
const tokens: Record<string, number[]> = {};
for (const file of readdirSync(dir).filter((f) => f.endsWith('.json')).sort()) {
  const d = JSON.parse(readFileSync(join(dir, file), 'utf8')) as ScriptedModelDescription;
  const model = await loadModel(d.path, { gpuLayers: Number(layers) });
  const ctx = await model.createContext({ contextSize: 2048, sequences: 1, threads: 1, batchThreads: 1, toolCallMarkers: false });
  for (const [name, s] of Object.entries(d.scripts)) {
    const r = await ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, maxTokens: s.greedy.length + 4 });
    tokens[`${d.name}/${name}`] = Array.from(r.tokens ?? []);
  }
  await model.dispose();
}
console.log(JSON.stringify({ devices: info.devices, loaded: info.loadedBackends, gpuPackages: info.gpuPackages, logs, tokens }));
