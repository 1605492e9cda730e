// The registry packages as users get them (issue 28): scripts/platform-packages.mjs writes
// `llamux` (JavaScript + the bundled llama.cpp source) and `@llamux/linux-x64` (the addon and
// its CPU variants, with os/cpu/libc fields); they are published to a private verdaccio on
// loopback (no uplinks: llamux's dependencies are published there from the checkout), and
// fresh apps install `llamux` by name with npm's normal resolution. Checks: npm picks exactly
// the matching platform package, nothing compiles, the app generates; with
// --omit=optional the install fails (no compiler) or the load fails with one message that
// names the missing package.
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registryWithLlamux, type PackedPackage, type Registry } from '../helpers/registry.js';
import { script, testModel } from '../helpers/models.js';
import { projectRoot, tinyModelPath } from '../helpers/paths.js';

const MINUTE = 60_000;
const scripted = testModel('single-marker');
const main = script('single-marker');
const work = mkdtempSync(join(tmpdir(), 'llamux registry '));
const isLinuxX64 = process.platform === 'linux' && process.arch === 'x64';
let registry: Registry;
let packages: PackedPackage[] = [];

function sh(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): SpawnSyncReturns<string> {
  return spawnSync(cmd, args, { cwd, env, encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
}

function must(r: SpawnSyncReturns<string>, what: string): SpawnSyncReturns<string> {
  if (r.status !== 0) throw new Error(`${what} failed (${r.status ?? r.signal}):\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
  return r;
}

function newProject(name: string): string {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: name.replace(/\W+/g, '-'), version: '1.0.0', private: true, type: 'module' }));
  copyFileSync(join(projectRoot, 'test', 'package', 'consumer-app.mjs'), join(dir, 'app.mjs'));
  return dir;
}

/** A PATH with node, npm and a shell but no compiler, cmake or make. */
function pathWithoutCompilers(): string {
  const bin = join(work, 'bin-no-compilers');
  mkdirSync(bin, { recursive: true });
  const npmCli = join(dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'bin', 'npm-cli.js');
  const links: Record<string, string> = { node: process.execPath, sh: '/bin/sh', npm: npmCli };
  for (const [name, target] of Object.entries(links)) if (!existsSync(join(bin, name))) symlinkSync(target, join(bin, name));
  return bin;
}

function duMb(path: string): number {
  return Number(sh('du', ['-sLm', path], work).stdout.split('\t')[0]);
}

beforeAll(async () => {
  ({ registry, packages } = await registryWithLlamux(work));
}, 30 * MINUTE);

afterAll(() => {
  registry?.stop();
  if (process.env.LLAMUX_KEEP_CONSUMER !== '1') rmSync(work, { recursive: true, force: true });
});

describe('llamux from a registry', () => {
  it('writes a main package without binaries and one platform package per prebuild', () => {
    const names = packages.map((p) => p.name).sort();
    expect(names).toEqual(isLinuxX64 ? ['@llamux/linux-x64', 'llamux'] : expect.arrayContaining(['llamux']));
    const view = must(sh('npm', ['view', 'llamux', '--json', '--registry', registry.url], work, registry.env), 'npm view llamux');
    const meta = JSON.parse(view.stdout) as { optionalDependencies: Record<string, string>; version: string; scripts: Record<string, string> };
    expect(meta.optionalDependencies).toEqual({ '@llamux/linux-x64': meta.version });
    expect(Object.keys(meta.scripts)).toEqual(['install']);
    const plat = JSON.parse(must(sh('npm', ['view', '@llamux/linux-x64', '--json', '--registry', registry.url], work, registry.env), 'npm view').stdout) as Record<string, unknown>;
    expect(plat).toMatchObject({ os: ['linux'], cpu: ['x64'], libc: ['glibc'] });
  });

  it('installs llamux by name: the matching platform package, no compile, and generates', () => {
    const dir = newProject('npm app');
    const t0 = performance.now();
    const r = must(sh('npm', ['install', '--foreground-scripts', 'llamux'], dir, registry.env), 'npm install llamux');
    const seconds = (performance.now() - t0) / 1000;
    const pkg = join(dir, 'node_modules', 'llamux');
    const plat = join(dir, 'node_modules', '@llamux', 'linux-x64');
    console.log(`llamux registry: npm install llamux: ${seconds.toFixed(1)} s; node_modules/llamux ${duMb(pkg)} MB + @llamux/linux-x64 ${duMb(plat)} MB; whole node_modules ${duMb(join(dir, 'node_modules'))} MB`);
    expect(readdirSync(join(dir, 'node_modules', '@llamux'))).toEqual(['linux-x64']);
    expect(r.stdout + r.stderr).toContain(`llamux: using the prebuilt native addon ${join(plat, 'llamux.node')}`);
    expect(r.stdout + r.stderr).not.toMatch(/building the native addon from source/);
    expect(existsSync(join(pkg, 'build'))).toBe(false);
    expect(existsSync(join(pkg, 'prebuilds'))).toBe(false);
    expect(existsSync(join(plat, 'llamux.node'))).toBe(true);
    expect(readdirSync(plat).filter((f) => /^libggml-cpu-.*\.so$/.test(f)).length).toBeGreaterThanOrEqual(2);
    const run = must(sh(process.execPath, ['app.mjs', tinyModelPath, scripted.path, main.prompt], dir), 'the app');
    const out = JSON.parse(run.stdout.trim().split('\n').pop()!) as Record<string, unknown>;
    expect(out.roundTrip).toBe(true);
    expect(out.tinyGenerated).toBe(8);
    const span = main.greedyText.slice(main.greedyText.indexOf('<tool_call>') + '<tool_call>'.length, main.greedyText.indexOf('</tool_call>'));
    expect(out.spans).toEqual([span]);
    expect(JSON.parse(out.toolResult as string)).toEqual({ city: 'Paris', forecast: 'sunny' });
  }, 10 * MINUTE);

  it('installs with pnpm (no install scripts run by default): the platform package is found at load', () => {
    const dir = newProject('pnpm app');
    const pnpm = join(projectRoot, 'node_modules', 'pnpm', 'bin', 'pnpm.cjs');
    must(sh(process.execPath, [pnpm, 'add', 'llamux', '--registry', registry.url, '--store-dir', join(work, 'pnpm-store'), '--config.confirmModulesPurge=false'], dir, registry.env), 'pnpm add llamux');
    const store = readdirSync(join(dir, 'node_modules', '.pnpm'));
    expect(store.filter((d) => d.startsWith('@llamux+'))).toEqual([expect.stringMatching(/^@llamux\+linux-x64@/)]);
    expect(existsSync(join(dir, 'node_modules', 'llamux', 'build'))).toBe(false);
    const run = must(sh(process.execPath, ['app.mjs', tinyModelPath, scripted.path, main.prompt], dir), 'the pnpm app');
    const out = JSON.parse(run.stdout.trim().split('\n').pop()!) as Record<string, unknown>;
    expect(out.tinyGenerated).toBe(8);
    expect(JSON.parse(out.toolResult as string)).toEqual({ city: 'Paris', forecast: 'sunny' });
  }, 10 * MINUTE);

  it('without optional dependencies: the install says which package is missing (no compiler here)', () => {
    const dir = newProject('omit optional app');
    const env = { ...registry.env, PATH: pathWithoutCompilers() };
    const r = sh(process.execPath, [join(env.PATH!, 'npm'), 'install', '--foreground-scripts', '--omit=optional', 'llamux'], dir, env);
    expect(r.status).not.toBe(0);
    const text = r.stdout + r.stderr;
    expect(text).toContain('the platform package @llamux/linux-x64: not installed');
    expect(text).toContain('npm install @llamux/linux-x64');
    expect(text).toMatch(/building from source needs cmake/);
    expect(existsSync(join(dir, 'node_modules', '@llamux'))).toBe(false);
  }, 10 * MINUTE);

  it('without optional dependencies and install scripts: loading fails with NATIVE_LOAD_FAILED naming the package', () => {
    const dir = newProject('omit optional no scripts app');
    must(sh('npm', ['install', '--omit=optional', '--ignore-scripts', 'llamux'], dir, registry.env), 'npm install --omit=optional --ignore-scripts');
    expect(existsSync(join(dir, 'node_modules', '@llamux'))).toBe(false);
    const r = sh(process.execPath, ['--input-type=module', '-e', "try { await import('llamux') } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); process.exit(0) } process.exit(9)"], dir);
    expect(r.status).toBe(0);
    const err = JSON.parse(r.stdout.trim()) as { code: string; message: string };
    expect(err.code).toBe('NATIVE_LOAD_FAILED');
    expect(err.message).toContain('the platform package @llamux/linux-x64 (not installed');
    expect(err.message).toContain('npm install @llamux/linux-x64');
    // then adding the platform package is all it takes
    must(sh('npm', ['install', '--ignore-scripts', '@llamux/linux-x64'], dir, registry.env), 'npm install @llamux/linux-x64');
    const ok = sh(process.execPath, ['--input-type=module', '-e', "const { systemInfo } = await import('llamux'); console.log(systemInfo().cpuVariant)"], dir);
    expect(ok.status, ok.stderr).toBe(0);
    expect(ok.stdout.trim()).not.toBe('');
  }, 10 * MINUTE);
});
