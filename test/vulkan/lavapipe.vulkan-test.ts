// `npm run test:vulkan` (issue 28): the Vulkan backend built from Debian's glslc and
// libvulkan-dev (scripts/test-vulkan.mjs builds it), run on Mesa's software Vulkan device
// (lavapipe, mesa-vulkan-drivers). Every script of every scripted model generates with all
// layers on the Vulkan device and must give the CPU's greedy tokens, which must be the script.
// Then the backend as users get it, an @llamux/linux-x64-vulkan package in an app: its check
// in a child process passes and the app runs on the device.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import type { ScriptedModelDescription } from '../../src/gguf/scripted.js';
import { projectRoot } from '../helpers/paths.js';
import { registryWithLlamux, type Registry } from '../helpers/registry.js';

const library = process.env.LLAMUX_VULKAN_LIBRARY ?? join(projectRoot, 'build-vulkan', 'Release', 'libggml-vulkan.so');
const fixtures = join(projectRoot, '.cache', 'test-models');
const tsx = pathToFileURL(join(projectRoot, 'node_modules', 'tsx', 'dist', 'loader.mjs')).href;
const runner = join(projectRoot, 'test', 'vulkan', 'greedy-run.ts');
const work = mkdtempSync(join(tmpdir(), 'llamux vulkan '));
// lavapipe is a CPU-type device, which ggml-vulkan skips unless asked for by index
const VK = { GGML_VK_VISIBLE_DEVICES: '0' };

let registry: Registry | undefined;
afterAll(() => {
  registry?.stop();
  rmSync(work, { recursive: true, force: true });
});

interface Run {
  devices: Array<{ name: string; description: string; type: string }>;
  loaded: string[];
  gpuPackages: Array<{ name: string; ok: boolean; reason?: string; devices: string[] }>;
  logs: string[];
  tokens: Record<string, number[]>;
}

function run(env: NodeJS.ProcessEnv, gpuLayers: number, cwd = projectRoot): Run {
  const r = spawnSync(process.execPath, ['--import', tsx, runner, fixtures, String(gpuLayers)], { cwd, env: { ...process.env, ...env }, encoding: 'utf8', timeout: 15 * 60_000, maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`greedy-run failed (${r.status ?? r.signal}):\n${r.stderr.slice(-4000)}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Run;
}

function expected(): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const f of readdirSync(fixtures).filter((f) => f.endsWith('.json')).sort()) {
    const d = JSON.parse(readFileSync(join(fixtures, f), 'utf8')) as ScriptedModelDescription;
    for (const [name, s] of Object.entries(d.scripts)) out[`${d.name}/${name}`] = [...s.greedy];
  }
  return out;
}

describe('Vulkan on lavapipe', () => {
  it('the backend library was built', () => {
    expect(existsSync(library), `${library}: run \`npm run test:vulkan\`, which builds it`).toBe(true);
  });

  it('generates every script on the Vulkan device, token for token as on the CPU', () => {
    const cpu = run({ LLAMUX_GPU_PACKAGES: 'off' }, 0);
    const vk = run({ ...VK, LLAMUX_BACKEND_FILES: library }, 999);
    expect(cpu.devices.every((d) => d.type === 'cpu')).toBe(true);
    const gpu = vk.devices.filter((d) => d.type !== 'cpu');
    expect(gpu.map((d) => d.name)).toEqual(['Vulkan0']);
    expect(gpu[0]!.description).toMatch(/llvmpipe/);
    expect(vk.loaded).toContain('libggml-vulkan.so');
    // every layer of every model went to the device (llama.cpp's own count)
    const offloads = vk.logs.map((l) => /offloaded (\d+)\/(\d+) layers to GPU/.exec(l)).filter((m) => m !== null);
    expect(offloads.length).toBe(readdirSync(fixtures).filter((f) => f.endsWith('.json')).length);
    for (const m of offloads) expect(m[1]).toBe(m[2]);
    const want = expected();
    expect(Object.keys(want).length).toBeGreaterThanOrEqual(10);
    expect(cpu.tokens).toEqual(want);
    expect(vk.tokens).toEqual(cpu.tokens);
  }, 30 * 60_000);

  it('as an @llamux/linux-x64-vulkan package in an app: checked in a child process, then used', () => {
    const app = join(work, 'app');
    const pkg = join(app, 'node_modules', '@llamux', 'linux-x64-vulkan');
    mkdirSync(pkg, { recursive: true });
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'vk-app', private: true }));
    writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: '@llamux/linux-x64-vulkan', version: '0.0.0', llamux: { backend: 'vulkan', library: 'libggml-vulkan.so' } }));
    copyFileSync(library, join(pkg, 'libggml-vulkan.so'));
    const r = run(VK, 999, app);
    expect(r.gpuPackages).toEqual([{ name: '@llamux/linux-x64-vulkan', library: join(pkg, 'libggml-vulkan.so'), ok: true, devices: ['Vulkan0'] }]);
    expect(r.loaded).toContain('libggml-vulkan.so');
    expect(r.tokens).toEqual(expected());
    // without GGML_VK_VISIBLE_DEVICES ggml-vulkan sees no GPU here: the check says so, CPU runs
    const none = run({ GGML_VK_VISIBLE_DEVICES: undefined }, 999, app);
    expect(none.gpuPackages[0]).toMatchObject({ ok: false });
    expect(none.gpuPackages[0]!.reason).toMatch(/found no device/);
    expect(none.loaded).not.toContain('libggml-vulkan.so');
  }, 30 * 60_000);

  it('from a registry: npm install llamux @llamux/linux-x64-vulkan in a fresh app runs on the device', async () => {
    const made = await registryWithLlamux(join(work, 'reg'), ['--gpu', `vulkan=${join(library, '..')}`]);
    registry = made.registry;
    const vk = made.packages.find((p) => p.name === '@llamux/linux-x64-vulkan')!;
    console.log(`llamux vulkan: @llamux/linux-x64-vulkan ${(vk.size / 1e6).toFixed(1)} MB packed, ${(vk.unpackedSize / 1e6).toFixed(1)} MB unpacked`);
    const app = join(work, 'registry app');
    mkdirSync(app, { recursive: true });
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'vk-registry-app', private: true, type: 'module' }));
    const i = spawnSync('npm', ['install', 'llamux', '@llamux/linux-x64-vulkan'], { cwd: app, env: registry.env, encoding: 'utf8' });
    expect(i.status, i.stderr).toBe(0);
    expect(readdirSync(join(app, 'node_modules', '@llamux')).sort()).toEqual(['linux-x64', 'linux-x64-vulkan']);
    const d = JSON.parse(readFileSync(join(fixtures, 'single-marker.json'), 'utf8')) as ScriptedModelDescription;
    const s = d.scripts.main!;
    const code = `
      import { loadModel, systemInfo } from 'llamux';
      const info = systemInfo();
      const model = await loadModel(${JSON.stringify(d.path)}, { gpuLayers: 999 });
      const ctx = await model.createContext({ contextSize: 512, sequences: 1, threads: 1, batchThreads: 1, toolCallMarkers: false });
      const r = await ctx.complete({ prompt: ${JSON.stringify(s.promptTokens)}, temperature: 0, emitTokenIds: true });
      console.log(JSON.stringify({ gpuPackages: info.gpuPackages, loaded: info.loadedBackends, tokens: Array.from(r.tokens) }));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: app, env: { ...process.env, ...VK }, encoding: 'utf8', timeout: 10 * 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { gpuPackages: Array<{ name: string; ok: boolean; devices: string[] }>; loaded: string[]; tokens: number[] };
    expect(out.gpuPackages).toMatchObject([{ name: '@llamux/linux-x64-vulkan', ok: true, devices: ['Vulkan0'] }]);
    expect(out.loaded).toContain('libggml-vulkan.so');
    expect(out.tokens).toEqual([...s.greedy]);
  }, 30 * 60_000);
});
