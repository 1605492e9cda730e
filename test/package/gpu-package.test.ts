// A GPU backend package whose library is broken must cost a warning, never the process
// (issue 28). The "broken driver" here is a real shared library in the place of
// libggml-vulkan.so: one whose ggml_backend_init aborts (a driver that crashes while its devices
// are listed) and one whose ggml_backend_init returns nothing (no usable device). An app that
// has it installed as @llamux/linux-x64-vulkan still loads llamux, gets one warning naming the
// package and the reason, and generates on the CPU. (The working case is `npm run test:vulkan`.)
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { projectRoot, tinyModelPath } from '../helpers/paths.js';

const work = mkdtempSync(join(tmpdir(), 'llamux gpu package '));
const tsx = pathToFileURL(join(projectRoot, 'node_modules', 'tsx', 'dist', 'loader.mjs')).href;
const entry = pathToFileURL(join(projectRoot, 'src', 'index.ts')).href;

afterAll(() => rmSync(work, { recursive: true, force: true }));

/** An app folder with @llamux/linux-x64-vulkan holding a library built from `source`. */
function appWithBackend(name: string, source: string): string {
  const app = join(work, name);
  const pkg = join(app, 'node_modules', '@llamux', 'linux-x64-vulkan');
  mkdirSync(pkg, { recursive: true });
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name, private: true, type: 'module' }));
  writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: '@llamux/linux-x64-vulkan', version: '0.0.0', llamux: { backend: 'vulkan', library: 'libggml-vulkan.so' } }));
  writeFileSync(join(work, `${name}.c`), source);
  const cc = spawnSync('cc', ['-shared', '-fPIC', '-o', join(pkg, 'libggml-vulkan.so'), join(work, `${name}.c`)], { encoding: 'utf8' });
  if (cc.status !== 0) throw new Error(`cc failed: ${cc.stderr}`);
  return app;
}

const APP = `
import { loadModel, systemInfo } from ${JSON.stringify(entry)};
const info = systemInfo();
const model = await loadModel(process.argv[1]);
const ctx = await model.createContext({ contextSize: 128, sequences: 1, threads: 1, batchThreads: 1 });
const r = await ctx.complete({ prompt: 'Once upon a time', maxTokens: 4, temperature: 0, tokens: true });
await model.dispose();
console.log(JSON.stringify({ gpuPackages: info.gpuPackages, loaded: info.loadedBackends, devices: info.devices.map((d) => d.type), generated: r.tokens.length }));
`;

function runApp(app: string) {
  const r = spawnSync(process.execPath, ['--import', tsx, '--input-type=module', '-e', APP, tinyModelPath], { cwd: app, encoding: 'utf8', timeout: 120_000 });
  expect(r.status, r.stderr).toBe(0);
  return { out: JSON.parse(r.stdout.trim().split('\n').pop()!) as { gpuPackages: Array<{ name: string; ok: boolean; reason: string }>; loaded: string[]; devices: string[]; generated: number }, stderr: r.stderr };
}

describe('a GPU backend package that does not work', () => {
  it('crashes while loading: checked in a child process, a warning, the CPU', () => {
    const app = appWithBackend('crashing', '#include <stdlib.h>\nvoid *ggml_backend_init(void) { abort(); }\n');
    const { out, stderr } = runApp(app);
    expect(out.generated).toBe(4);
    expect(out.loaded).not.toContain('libggml-vulkan.so');
    expect(out.devices.every((t) => t === 'cpu')).toBe(true);
    expect(out.gpuPackages).toHaveLength(1);
    expect(out.gpuPackages[0]).toMatchObject({ name: '@llamux/linux-x64-vulkan', ok: false });
    expect(out.gpuPackages[0]!.reason).toContain('killed by SIGABRT');
    expect(stderr).toContain('[LLAMUX_GPU_BACKEND_UNAVAILABLE]');
    expect(stderr).toContain('@llamux/linux-x64-vulkan is not used');
  }, 180_000);

  it('loads but registers nothing: a warning, the CPU', () => {
    const app = appWithBackend('empty', 'void *ggml_backend_init(void) { return 0; }\n');
    const { out, stderr } = runApp(app);
    expect(out.generated).toBe(4);
    expect(out.loaded).not.toContain('libggml-vulkan.so');
    expect(out.gpuPackages[0]).toMatchObject({ name: '@llamux/linux-x64-vulkan', ok: false });
    expect(out.gpuPackages[0]!.reason).toMatch(/ggml did not load .*libggml-vulkan\.so/);
    expect(stderr).toContain('[LLAMUX_GPU_BACKEND_UNAVAILABLE]');
  }, 180_000);

  it('LLAMUX_GPU_PACKAGES=off skips the package and its check', () => {
    const app = appWithBackend('crashing-off', '#include <stdlib.h>\nvoid *ggml_backend_init(void) { abort(); }\n');
    const r = spawnSync(process.execPath, ['--import', tsx, '--input-type=module', '-e', APP, tinyModelPath], { cwd: app, encoding: 'utf8', timeout: 120_000, env: { ...process.env, LLAMUX_GPU_PACKAGES: 'off' } });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout.trim().split('\n').pop()!).gpuPackages).toEqual([]);
    expect(r.stderr).not.toContain('LLAMUX_GPU_BACKEND_UNAVAILABLE');
  }, 180_000);
});
