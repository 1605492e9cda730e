// `npm run test:vulkan` (issue 38, item 4): MoE expert placement on a real GPU backend, Mesa's
// software Vulkan device (lavapipe). With every layer offloaded, cpuMoe keeps every expert
// tensor (blk.N.ffn_*_exps) in a CPU buffer and puts everything else of the layers on
// Vulkan0; nCpuMoe: 2 does it for layers 0 and 1 only. Greedy output is the zoo model's built-in
// chain in every case, as on the CPU.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { zooGreedyChain } from '../../src/gguf/index.js';
import { projectRoot } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

const library = process.env.LLAMUX_VULKAN_LIBRARY ?? join(projectRoot, 'build-vulkan', 'Release', 'libggml-vulkan.so');
const tsx = pathToFileURL(join(projectRoot, 'node_modules', 'tsx', 'dist', 'loader.mjs')).href;
const runner = join(projectRoot, 'test', 'vulkan', 'moe-run.ts');
const work = mkdtempSync(join(tmpdir(), 'llamux vulkan moe '));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const EXPERT = /^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_exps\./;

interface Run {
  devices: Array<{ name: string; type: string }>;
  logs: string[];
  loads: Array<{ arch: string; options: string; tensors: Array<{ name: string; device: string; bytes: number }>; tokens: number[] }>;
}

describe('MoE experts in system RAM on the Vulkan device (lavapipe)', () => {
  it('cpuMoe / nCpuMoe keep the experts in CPU buffers, the rest on Vulkan0, greedy output unchanged', async () => {
    const zoo = await zooModels(['qwen35moe', 'gpt-oss']);
    const list = join(work, 'zoo.json');
    writeFileSync(list, JSON.stringify(zoo));
    const r = spawnSync(process.execPath, ['--import', tsx, runner, list], {
      cwd: projectRoot,
      // lavapipe is a CPU-type device, which ggml-vulkan skips unless asked for by index
      env: { ...process.env, GGML_VK_VISIBLE_DEVICES: '0', LLAMUX_BACKEND_FILES: library },
      encoding: 'utf8',
      timeout: 15 * 60_000,
      maxBuffer: 1 << 26,
    });
    expect(r.status, r.stderr.slice(-4000)).toBe(0);
    const run = JSON.parse(r.stdout.trim().split('\n').pop()!) as Run;
    expect(run.devices.filter((d) => d.type !== 'cpu').map((d) => d.name)).toEqual(['Vulkan0']);
    expect(run.loads).toHaveLength(6);
    for (const load of run.loads) {
      const what = `${load.arch} ${load.options}`;
      const d = zoo[load.arch as 'qwen35moe' | 'gpt-oss'];
      expect(load.tokens, what).toEqual(zooGreedyChain(d.successors, d.successors.set[2]!, 8));
      // where the plain load put each tensor (a weight whose op the device lacks stays on the CPU anyway)
      const base = new Map(run.loads.find((l) => l.arch === load.arch && l.options === '{}')!.tensors.map((t) => [t.name, t.device]));
      const experts = load.tensors.filter((t) => EXPERT.test(t.name));
      expect(experts.length, what).toBeGreaterThanOrEqual(3 * d.nLayer);
      for (const t of experts) expect(base.get(t.name), `plain ${load.arch} ${t.name}`).toBe('Vulkan0');
      expect(load.tensors.filter((t) => t.name.startsWith('blk.') && t.device === 'Vulkan0').length, what).toBeGreaterThan(experts.length);
      for (const t of load.tensors.filter((t) => !EXPERT.test(t.name))) expect(t.device, `${what} ${t.name}`).toBe(base.get(t.name));
      for (const t of experts) {
        const il = Number(EXPERT.exec(t.name)![1]);
        const inRam = load.options === '{"cpuMoe":true}' || (load.options === '{"nCpuMoe":2}' && il < 2);
        expect(t.device, `${what} ${t.name}`).toBe(inRam ? 'CPU' : 'Vulkan0');
      }
    }
    // llama.cpp's own account: a CPU model buffer beside the Vulkan one when experts stay in RAM
    expect(run.logs.some((l) => /Vulkan0 model buffer size/.test(l))).toBe(true);
  }, 20 * 60_000);
});
