// The packed llamux as an app gets it (issue 12): `npm pack`, then a fresh project outside the
// repository (in a folder whose path has spaces) installs the tarball and runs
// consumer-app.mjs: a generation on the shared tiny model and one tool call end to end on a
// scripted model. Four ways: npm with the prebuild; npm with no compiler or cmake on PATH;
// npm with LLAMUX_BUILD_FROM_SOURCE=1 and no node-llama-cpp anywhere (bundled source); pnpm
// (a symlinked layout). A CommonJS app (consumer-app.cjs) require()s every export path and
// type-checks against them. And a binary that cannot load gives llamux's one error.
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { script, testModel } from '../helpers/models.js';
import { projectRoot, tinyModelPath } from '../helpers/paths.js';

const MINUTE = 60_000;
const scripted = testModel('single-marker');
const main = script('single-marker');
const work = mkdtempSync(join(tmpdir(), 'llamux consumer '));
let tarball = '';

function sh(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): SpawnSyncReturns<string> {
  return spawnSync(cmd, args, { cwd, env, encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
}

/** Runs an install and prints how long it took and what it left on disk (README figures). */
function timedInstall(what: string, cmd: string, args: string[], dir: string, env: NodeJS.ProcessEnv = process.env): SpawnSyncReturns<string> {
  const t0 = performance.now();
  const r = must(sh(cmd, args, dir, env), what);
  const seconds = (performance.now() - t0) / 1000;
  const du = sh('du', ['-sLm', join(dir, 'node_modules', 'llamux')], dir).stdout.split('\t')[0];
  console.log(`llamux consumer: ${what}: ${seconds.toFixed(1)} s, node_modules/llamux ${du} MB`);
  return r;
}

function must(r: SpawnSyncReturns<string>, what: string): SpawnSyncReturns<string> {
  if (r.status !== 0) throw new Error(`${what} failed (${r.status ?? r.signal}):\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
  return r;
}

/** A fresh app project in `work` with the app script in it. */
function newProject(name: string): string {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: name.replace(/\W+/g, '-'), version: '1.0.0', private: true, type: 'module' }));
  copyFileSync(join(projectRoot, 'test', 'package', 'consumer-app.mjs'), join(dir, 'app.mjs'));
  return dir;
}

/** Runs the app and checks what an app must see. */
function runApp(dir: string, env: NodeJS.ProcessEnv = process.env): Record<string, unknown> {
  const r = must(sh(process.execPath, ['app.mjs', tinyModelPath, scripted.path, main.prompt], dir, env), 'the app');
  const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as Record<string, unknown>;
  expect(out.roundTrip).toBe(true);
  expect(out.tinyGenerated).toBe(8);
  // The scripted greedy output, with the span's bytes between the markers.
  const span = main.greedyText.slice(main.greedyText.indexOf('<tool_call>') + '<tool_call>'.length, main.greedyText.indexOf('</tool_call>'));
  expect(out.spans).toEqual([span]);
  expect(JSON.parse(out.toolResult as string)).toEqual({ city: 'Paris', forecast: 'sunny' });
  return out;
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

beforeAll(() => {
  // Whatever the checkout has, the tarball must carry its own copy of everything.
  const r = must(sh('npm', ['pack', '--json', '--pack-destination', work], projectRoot), 'npm pack');
  const json = r.stdout.startsWith('[') ? r.stdout : r.stdout.slice(r.stdout.lastIndexOf('\n[\n') + 1);
  const info = JSON.parse(json) as Array<{ filename: string; size: number; unpackedSize: number; files: Array<{ path: string }> }>;
  tarball = join(work, info[0]!.filename);
  const files = info[0]!.files.map((f) => f.path);
  expect(files).toContain('deps/llama.cpp/CMakeLists.txt');
  expect(files).toContain('deps/llama.cpp/LICENSE');
  expect(files).toContain('deps/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt');
  expect(files.some((f) => f.startsWith('deps/llama.cpp/tests/') || f.startsWith('deps/llama.cpp/models/'))).toBe(false);
  // libmtmd (images and audio) builds from the packed source too, without its test media
  expect(files).toEqual(expect.arrayContaining(['deps/llama.cpp/tools/mtmd/mtmd.cpp', 'deps/llama.cpp/tools/mtmd/clip.cpp', 'deps/llama.cpp/tools/mtmd/debug/mtmd-debug.h']));
  expect(files.some((f) => /^deps\/llama\.cpp\/tools\/mtmd\/(test-|tests\/|legacy-models\/)/.test(f))).toBe(false);
  expect(files.some((f) => /^prebuilds\/linux-x64\/llamux\.glibc\.node$/.test(f))).toBe(process.platform === 'linux' && process.arch === 'x64');
  expect(files.filter((f) => /libggml-cpu-.*\.so$/.test(f)).length).toBeGreaterThanOrEqual(2);
  expect(files.some((f) => f.startsWith('src/') || f.startsWith('test/'))).toBe(false);
  console.log(`llamux tarball: ${(info[0]!.size / 1e6).toFixed(1)} MB packed, ${(info[0]!.unpackedSize / 1e6).toFixed(1)} MB unpacked, ${files.length} files`);
}, 30 * MINUTE);

afterAll(() => {
  if (process.env.LLAMUX_KEEP_CONSUMER !== '1') rmSync(work, { recursive: true, force: true });
});

describe('the packed llamux in a fresh app', () => {
  it('installs with npm from the prebuild and generates', () => {
    const dir = newProject('npm app');
    const r = timedInstall('npm install (prebuild)', 'npm', ['install', '--foreground-scripts', '--no-audit', '--no-fund', tarball], dir);
    expect(r.stdout + r.stderr).toMatch(/llamux: using the prebuilt native addon/);
    expect(existsSync(join(dir, 'node_modules', 'llamux', 'build'))).toBe(false);
    expect(existsSync(join(dir, 'node_modules', 'better-sqlite3'))).toBe(false);
    expect(existsSync(join(dir, 'node_modules', 'node-llama-cpp'))).toBe(false);
    const out = runApp(dir);
    expect(out.buildKind).toBe('variants');
  }, 10 * MINUTE);

  it('installs with no compiler or cmake on PATH (prebuild path)', () => {
    const dir = newProject('no compiler app');
    const env = { ...process.env, PATH: pathWithoutCompilers() };
    expect(sh('sh', ['-c', 'command -v cmake || command -v c++ || command -v g++ || command -v cc'], dir, env).status).not.toBe(0);
    const r = must(sh(process.execPath, [join(env.PATH, 'npm'), 'install', '--foreground-scripts', '--no-audit', '--no-fund', tarball], dir, env), 'npm install');
    expect(r.stdout + r.stderr).toMatch(/llamux: using the prebuilt native addon/);
    runApp(dir, env);
  }, 10 * MINUTE);

  it('installs with pnpm (symlinked layout) and generates', () => {
    const dir = newProject('pnpm app');
    const pnpm = join(projectRoot, 'node_modules', 'pnpm', 'bin', 'pnpm.cjs');
    timedInstall('pnpm add (prebuild)', process.execPath, [pnpm, 'add', '--store-dir', join(work, 'pnpm-store'), '--config.confirmModulesPurge=false', tarball], dir);
    // pnpm links node_modules/llamux into its .pnpm store folder.
    expect(statSync(join(dir, 'node_modules', 'llamux')).isDirectory()).toBe(true);
    expect(readdirSync(join(dir, 'node_modules', '.pnpm')).some((d) => d.startsWith('llamux@'))).toBe(true);
    runApp(dir);
  }, 10 * MINUTE);

  it('builds from the bundled source with LLAMUX_BUILD_FROM_SOURCE=1 and no node-llama-cpp anywhere', () => {
    const dir = newProject('source app');
    // Two CPU variants, as a checkout builds (the baseline and this CPU's best): the prebuild
    // that `npm pack` ran above compiled all eight from the same pruned llama.cpp source, and six
    // more cold compiles of ggml's CPU backend would add minutes to CI for nothing new.
    const env: NodeJS.ProcessEnv = { ...process.env, LLAMUX_BUILD_FROM_SOURCE: '1', LLAMUX_CPU_VARIANTS: 'host' };
    delete env.LLAMA_CPP_DIR;
    const r = timedInstall('npm install (LLAMUX_BUILD_FROM_SOURCE=1)', 'npm', ['install', '--foreground-scripts', '--no-audit', '--no-fund', tarball], dir, env);
    expect(r.stdout + r.stderr).toMatch(/llamux: building the native addon from source/);
    const pkg = join(dir, 'node_modules', 'llamux');
    expect(existsSync(join(pkg, 'build', 'Release', 'llamux.node'))).toBe(true);
    // Nothing on the resolution path of the package could have lent it node-llama-cpp.
    const probe = sh(process.execPath, ['-e', 'try { require.resolve("node-llama-cpp"); process.exit(0) } catch { process.exit(7) }'], pkg);
    expect(probe.status).toBe(7);
    const out = runApp(dir);
    expect(out.buildKind).toBe('variants');
  }, 60 * MINUTE);

  it('works from CommonJS: require() of every export path, and their types', () => {
    const dir = join(work, 'cjs app');
    mkdirSync(dir, { recursive: true });
    // No "type": a CommonJS project, as Electron and NestJS apps are.
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'cjs-app', version: '1.0.0', private: true }));
    copyFileSync(join(projectRoot, 'test', 'package', 'consumer-app.cjs'), join(dir, 'app.cjs'));
    const r = timedInstall('npm install (CommonJS app)', 'npm', ['install', '--foreground-scripts', '--no-audit', '--no-fund', tarball], dir);
    expect(r.stdout + r.stderr).toMatch(/llamux: using the prebuilt native addon/);
    const run = must(sh(process.execPath, ['app.cjs', tinyModelPath, main.prompt, join(dir, 'fixtures')], dir), 'the CommonJS app');
    // require(esm) of a graph without top-level await: no warning, no error
    expect(run.stderr).not.toMatch(/ExperimentalWarning|ERR_REQUIRE/);
    const out = JSON.parse(run.stdout.trim().split('\n').pop()!) as Record<string, unknown>;
    console.log(`llamux consumer: require() of the four export paths: ${(out.requireMs as number).toFixed(0)} ms`);
    expect(out.exportKinds).toEqual({
      loadModel: 'function', systemInfo: 'function', defineTool: 'function', runToolCalls: 'function', createServer: 'function', ensureTestModels: 'function',
    });
    expect(out.sameInstance).toBe(true);
    expect(out.buildKind).toBe('variants');
    expect(out.roundTrip).toBe(true);
    expect(out.tinyGenerated).toBe(8);
    const span = main.greedyText.slice(main.greedyText.indexOf('<tool_call>') + '<tool_call>'.length, main.greedyText.indexOf('</tool_call>'));
    expect(out.spans).toEqual([span]);
    expect(JSON.parse(out.toolResult as string)).toEqual({ city: 'Paris', forecast: 'sunny' });
    expect(out.serverStatus).toBe(200);
    expect(out.serverModels).toBe(1);

    // The types a CommonJS TypeScript project sees: `module: nodenext` (a .cts file, require of
    // ESM types, TypeScript 5.8+) and the classic `module: commonjs` (node10 resolution, which
    // ignores "exports": the subpaths come from "typesVersions").
    const check = [
      "import llamux = require('llamux');",
      "import tools = require('llamux/tools');",
      "import server = require('llamux/server');",
      "import testing = require('llamux/testing');",
      'export async function run(path: string): Promise<string> {',
      '  const model: llamux.Model = await llamux.loadModel(path);',
      "  const tool = tools.defineTool({ name: 't', parameters: { type: 'object', properties: {} }, handler: () => 'ok' });",
      '  const s: server.LlamuxServer = await server.createServer({ model, port: 0 });',
      "  const names: readonly testing.TestModelName[] = testing.TEST_MODEL_NAMES;",
      '  await s.close();',
      '  return `${tool.name} ${names.length} ${llamux.systemInfo().cpuVariant}`;',
      '}',
      '',
    ].join('\n');
    writeFileSync(join(dir, 'check.cts'), check);
    writeFileSync(join(dir, 'check.ts'), check);
    const tsc = join(projectRoot, 'node_modules', 'typescript', 'bin', 'tsc');
    const typeRoots = join(projectRoot, 'node_modules', '@types');
    const common = ['--noEmit', '--strict', '--skipLibCheck', '--target', 'es2022', '--typeRoots', typeRoots, '--types', 'node'];
    const nodenext = sh(process.execPath, [tsc, ...common, '--module', 'nodenext', '--moduleResolution', 'nodenext', 'check.cts'], dir);
    expect(nodenext.stdout + nodenext.stderr, 'tsc --module nodenext').toBe('');
    expect(nodenext.status).toBe(0);
    const classic = sh(process.execPath, [tsc, ...common, '--module', 'commonjs', '--moduleResolution', 'node10', 'check.ts'], dir);
    expect(classic.stdout + classic.stderr, 'tsc --module commonjs').toBe('');
    expect(classic.status).toBe(0);
  }, 10 * MINUTE);

  it('reports a binary that cannot load with one error that says what to do', () => {
    const dir = newProject('broken app');
    must(sh('npm', ['install', '--no-audit', '--no-fund', '--ignore-scripts', tarball], dir), 'npm install');
    const pre = join(dir, 'node_modules', 'llamux', 'prebuilds', `${process.platform}-${process.arch}`);
    const node = readdirSync(pre).find((f) => f.endsWith('.node'))!;
    // 1. the addon itself is not a loadable library
    writeFileSync(join(pre, node), 'not an ELF file');
    let r = sh(process.execPath, ['--input-type=module', '-e', "await import('llamux')"], dir);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/LlamuxError: llamux could not load its native addon for linux-x64/);
    expect(r.stderr).toMatch(/Possible solutions:/);
    expect(r.stderr).toMatch(/LLAMUX_BUILD_FROM_SOURCE=1/);
    expect(r.stderr).not.toMatch(/node-gyp-build\.js/);
    // 2. the addon loads but none of the CPU backends is there
    cpSync(join(projectRoot, 'build', 'Release', 'llamux.node'), join(pre, node));
    for (const f of readdirSync(pre)) if (/^libggml-cpu-/.test(f)) rmSync(join(pre, f));
    r = sh(process.execPath, ['--input-type=module', '-e', "await import('llamux')"], dir);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/no CPU backend \(libggml-cpu-\*\.so\)/);
    expect(r.stderr).toMatch(/Possible solutions:/);
  }, 10 * MINUTE);
});
