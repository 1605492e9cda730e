// Loads the zoo's MoE models with every layer offloaded, with and without cpuMoe / nCpuMoe, and
// prints one JSON line: per load, where each weight went (Model.placement()) and the greedy
// tokens. Run in a child process by moe.vulkan-test.ts with the Vulkan backend (one set of
// backends per process). Usage: node --import tsx moe-run.ts ZOO_JSON
import { readFileSync } from 'node:fs';
import { loadModel, setLogger, systemInfo } from '../../src/index.js';
import type { ZooModelDescription } from '../../src/gguf/index.js';

const zoo = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Record<string, ZooModelDescription>;
const logs: string[] = [];
setLogger('info', (_level, message) => {
  if (/offload|buffer size|overrid/i.test(message)) logs.push(message.trim());
});
const loads: Array<{ arch: string; options: string; tensors: Array<{ name: string; device: string; bytes: number }>; tokens: number[] }> = [];
for (const [arch, d] of Object.entries(zoo)) {
  for (const options of [{}, { cpuMoe: true }, { nCpuMoe: 2 }]) {
    const model = await loadModel(d.path, { gpuLayers: 999, ...options });
    const ctx = await model.createContext({ contextSize: 512, sequences: 1, threads: 1, batchThreads: 1, toolCallMarkers: false });
    const r = await ctx.complete({ prompt: d.successors.set.slice(0, 3), temperature: 0, maxTokens: 8, emitTokenIds: true });
    loads.push({ arch, options: JSON.stringify(options), tensors: model.placement().tensors.map(({ name, device, bytes }) => ({ name, device, bytes })), tokens: Array.from(r.tokens ?? []) });
    await ctx.dispose();
    await model.dispose();
  }
}
console.log(JSON.stringify({ devices: systemInfo().devices, logs, loads }));
