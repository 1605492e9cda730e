#!/usr/bin/env node
// Builds the llamux addon from source with cmake-js against llama.cpp.
//
// Where llama.cpp comes from, first found wins:
//   1. LLAMA_CPP_DIR (any checkout)
//   2. deps/llama.cpp: the pruned llama.cpp tree. A packed llamux carries it; a checkout
//      exports it here (ignored by git) on first use from the devDependency node-llama-cpp's
//      git bundle. Both build from the same files, so ccache serves one from the other.
// The cmake build folder (build/) is kept between runs, so rebuilds are incremental;
// ccache is used when it is installed.
//
// The default build is portable: libllama/libggml as shared libraries next to llamux.node
// and the CPU backend once per ISA level, the best chosen at run time (what prebuilds ship).
// In a checkout (a git work tree) it builds only two CPU variants: the baseline x64 and the
// one this CPU would load (LLAMUX_CPU_VARIANTS=host, chosen by ggml's own score in
// CMakeLists.txt); everywhere else, and always for prebuilds and packs, the shipped eight.
//
// Environment:
//   LLAMA_CPP_DIR      use this llama.cpp checkout
//   LLAMUX_GPU=cuda    also build the CUDA backend (vulkan, metal likewise)
//   LLAMUX_NATIVE=1    one static binary tuned to this CPU (-march=native); not portable
//   LLAMUX_DEBUG=1     Debug build
//   LLAMUX_BUILD_DIR   cmake build folder (default build/)
//   LLAMUX_BUILD_TARGET  build only this cmake target (e.g. ggml-vulkan: a GPU backend
//                      library for a GPU package, scripts/platform-packages.mjs)
//   LLAMUX_CMAKE_ARGS  extra cmake definitions ("GGML_CUDA_F16=ON ...")
//   LLAMUX_SANITIZE=1  AddressSanitizer + UndefinedBehaviorSanitizer (llama.cpp and the addon)
//   LLAMUX_CPU_VARIANTS  x86 CPU variants: host (a checkout's default), shipped (the default
//                      elsewhere; what prebuilds ship), all (llama.cpp's list), or names
//                      ("x64,haswell")
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { applyLlamaCppPatches, llamaCppPatchIds } from './llama-patches.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'package.json'));

export class BuildError extends Error {}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', cwd: root, ...opts });
  if (r.error) throw new BuildError(`\`${cmd}\` could not start: ${r.error.message}`);
  if (r.status !== 0) throw new BuildError(`\`${cmd} ${args.join(' ')}\` failed with exit code ${r.status}`);
}

export function has(cmd, args = ['--version']) {
  return spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
}

// node-llama-cpp (a devDependency, never present in an app) does not export its
// package.json, so look for the bundle where a package manager puts it.
function findBundle() {
  const rel = join('node-llama-cpp', 'llama', 'gitRelease.bundle');
  for (let dir = root; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', rel);
    if (existsSync(candidate)) return candidate;
    if (dirname(dir) === dir) break;
  }
  try {
    const entry = require.resolve('node-llama-cpp');
    for (let dir = dirname(entry); dirname(dir) !== dir; dir = dirname(dir)) {
      const candidate = join(dir, 'llama', 'gitRelease.bundle');
      if (existsSync(candidate)) return candidate;
    }
  } catch {
    // not installed
  }
  return undefined;
}

// What the library build reads from llama.cpp; tests, docs, models, examples, python and CI
// stay behind, and of the tools only libmtmd (images and audio, built into the addon). Every ggml backend's source stays here, so CUDA/Vulkan/Metal builds work;
// the package's "files" leaves out the backends llamux never builds (SYCL, OpenCL, CANN, ...).
export const LLAMA_CPP_PATHS = ['CMakeLists.txt', 'LICENSE', 'licenses', 'cmake', 'include', 'src', 'ggml/CMakeLists.txt', 'ggml/cmake', 'ggml/include', 'ggml/src', 'vendor', 'tools/mtmd'];
const LLAMA_CPP_EXCLUDES = ['vendor/cpp-httplib', '**/.gitignore', '**/*.md', 'tools/mtmd/test-*', 'tools/mtmd/tests',
  'tools/mtmd/legacy-models', 'tools/mtmd/*.sh', 'tools/mtmd/requirements.txt'];

/** deps/llama.cpp: the pruned llama.cpp tree. A checkout exports it from node-llama-cpp's
 * bundle (through a bare clone in .cache/); a packed llamux carries it. */
export const llamaCppDefaultDir = join(root, 'deps', 'llama.cpp');

function exportFromBundle(bundle) {
  const git = join(root, '.cache', 'llama.cpp.git');
  if (!existsSync(join(git, 'HEAD'))) {
    console.log(`llamux: cloning llama.cpp from ${bundle}`);
    rmSync(git, { recursive: true, force: true });
    mkdirSync(dirname(git), { recursive: true });
    run('git', ['clone', '--quiet', '--bare', bundle, git]);
  }
  const rev = spawnSync('git', ['--git-dir', git, 'describe', '--tags', '--always'], { encoding: 'utf8' }).stdout.trim();
  const tmp = `${llamaCppDefaultDir}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const archive = spawnSync('git', ['--git-dir', git, 'archive', '--format=tar', 'HEAD', '--', ...LLAMA_CPP_PATHS,
    ...LLAMA_CPP_EXCLUDES.map((p) => `:(exclude,glob)${p}`)], { maxBuffer: 1 << 30 });
  if (archive.status !== 0) throw new BuildError(`git archive of llama.cpp failed: ${archive.stderr}`);
  const tar = spawnSync('tar', ['-x', '-C', tmp], { input: archive.stdout });
  if (tar.status !== 0) throw new BuildError(`unpacking llama.cpp failed: ${tar.stderr}`);
  applyLlamaCppPatches(tmp);
  writeFileSync(join(tmp, 'llamux-source.json'), `${JSON.stringify({ revision: rev || 'unknown', from: 'node-llama-cpp gitRelease.bundle', paths: LLAMA_CPP_PATHS, excluded: LLAMA_CPP_EXCLUDES, patches: llamaCppPatchIds }, null, 2)}\n`);
  rmSync(llamaCppDefaultDir, { recursive: true, force: true });
  renameSync(tmp, llamaCppDefaultDir);
}

// The export is current when it holds the same paths with the same patches applied.
function sameExport(sourceJson) {
  const recorded = JSON.parse(readFileSync(sourceJson, 'utf8'));
  return JSON.stringify(recorded.patches ?? []) === JSON.stringify(llamaCppPatchIds) &&
    JSON.stringify(recorded.paths ?? []) === JSON.stringify(LLAMA_CPP_PATHS) &&
    JSON.stringify(recorded.excluded ?? []) === JSON.stringify(LLAMA_CPP_EXCLUDES);
}

/** The llama.cpp source folder, or undefined when there is none and none can be made. */
export function findLlamaCpp({ make = true } = {}) {
  if (process.env.LLAMA_CPP_DIR) return resolve(process.env.LLAMA_CPP_DIR);
  // (an older checkout had a full clone here; the pruned export replaces it)
  const source = join(llamaCppDefaultDir, 'llamux-source.json');
  const bundle = findBundle();
  // A checkout re-exports when the patch list or the exported paths changed; a packed llamux
  // (no bundle) builds the tree it carries.
  if (existsSync(source) && (!bundle || !make || sameExport(source))) return llamaCppDefaultDir;
  if (!bundle || !make) return undefined;
  exportFromBundle(bundle);
  return llamaCppDefaultDir;
}

/** What a source build needs that this machine lacks (empty when it can build). */
export function missingBuildTools() {
  const missing = [];
  if (!has('cmake')) missing.push('cmake (3.18 or later)');
  const cxx = process.env.CXX || (process.platform === 'win32' ? undefined : 'c++');
  if (cxx && !has(cxx)) missing.push('a C++17 compiler (g++ or clang++)');
  return missing;
}

/** Whether this copy of llamux is a git checkout (a clone or a worktree), not an installed
 * package: a checkout builds only the CPU variants its own machine runs. */
export function isCheckout() {
  return existsSync(join(root, '.git'));
}

/** The LLAMUX_CPU_VARIANTS value for cmake (see CMakeLists.txt). */
export function cpuVariants() {
  const asked = (process.env.LLAMUX_CPU_VARIANTS ?? '').trim();
  if (asked) return asked.split(/[\s,;]+/).filter(Boolean).join(';');
  return isCheckout() ? 'host' : 'shipped';
}

export function buildDir() {
  return resolve(root, process.env.LLAMUX_BUILD_DIR || 'build');
}

export function build() {
  const llama = findLlamaCpp();
  if (!llama) {
    throw new BuildError('llama.cpp sources are missing: this copy of llamux has no deps/llama.cpp (a packed llamux carries it), ' +
      'and node-llama-cpp (whose source bundle a checkout uses) is not installed. Set LLAMA_CPP_DIR to a llama.cpp checkout.');
  }
  const missing = missingBuildTools();
  if (missing.length) throw new BuildError(`building from source needs ${missing.join(' and ')}, not found on PATH`);
  const cmakeJs = join(dirname(require.resolve('cmake-js/package.json')), 'bin', 'cmake-js');
  const out = buildDir();
  // configure every time (cheap on an existing cache, and it picks up changed options),
  // then build: ninja rebuilds only what changed.
  const args = ['--out', out, `--CDLLAMA_CPP_DIR=${llama}`];
  if (has('ninja')) args.push('--generator', 'Ninja');
  if (process.env.LLAMUX_DEBUG === '1') args.push('--debug');
  const gpu = (process.env.LLAMUX_GPU ?? '').toLowerCase();
  const gpuFlags = { cuda: 'GGML_CUDA', vulkan: 'GGML_VULKAN', metal: 'GGML_METAL' };
  if (gpu && !gpuFlags[gpu]) throw new BuildError(`LLAMUX_GPU=${gpu} is not one of ${Object.keys(gpuFlags).join(', ')}`);
  for (const [name, flag] of Object.entries(gpuFlags)) args.push(`--CD${flag}=${gpu === name ? 'ON' : 'OFF'}`);
  const native = process.env.LLAMUX_NATIVE === '1';
  args.push(`--CDLLAMUX_NATIVE=${native ? 'ON' : 'OFF'}`);
  args.push(`--CDLLAMUX_CPU_VARIANTS=${cpuVariants()}`);
  args.push(`--CDLLAMUX_BUILD_BENCH=${process.env.LLAMUX_BUILD_BENCH === '1' ? 'ON' : 'OFF'}`);
  // Extra cmake definitions, e.g. LLAMUX_CMAKE_ARGS="GGML_CUDA_F16=ON".
  for (const def of (process.env.LLAMUX_CMAKE_ARGS ?? '').split(/\s+/).filter(Boolean)) args.push(`--CD${def}`);
  const sanitize = process.env.LLAMUX_SANITIZE === '1';
  if (sanitize) {
    args.push('--CDLLAMA_SANITIZE_ADDRESS=ON', '--CDLLAMA_SANITIZE_UNDEFINED=ON', '--CDLLAMUX_SANITIZE=ON', '--CDCMAKE_BUILD_TYPE=RelWithDebInfo');
  }
  // Paths relative to the package root in ccache's keys: a checkout and an installed copy
  // (same deps/llama.cpp, same build/) share cached objects.
  const env = { ...process.env, CCACHE_BASEDIR: process.env.CCACHE_BASEDIR ?? root };
  run(process.execPath, [cmakeJs, 'configure', ...args], { env });
  const target = process.env.LLAMUX_BUILD_TARGET;
  run(process.execPath, [cmakeJs, 'build', ...args, ...(target ? ['--target', target] : [])], { env });
  const release = join(out, process.env.LLAMUX_DEBUG === '1' ? 'Debug' : 'Release');
  // What was built, read by the prebuild step and by `llamux inspect`.
  const cpu = native ? [] : readdirSync(release).map((f) => /^(?:lib)?ggml-cpu-(.+)\.(?:so|dll)$/.exec(f)?.[1]).filter(Boolean).sort();
  const info = { kind: native ? 'native' : 'variants', gpu: gpu || null, sanitize, debug: process.env.LLAMUX_DEBUG === '1', cpuVariants: cpu, llamaCpp: llamaRevision(llama) };
  writeFileSync(join(release, 'llamux-build.json'), `${JSON.stringify(info, null, 2)}\n`);
  return release;
}

function llamaRevision(dir) {
  try {
    return JSON.parse(readFileSync(join(dir, 'llamux-source.json'), 'utf8')).revision;
  } catch {
    return 'unknown';
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    build();
  } catch (err) {
    if (!(err instanceof BuildError)) throw err;
    console.error(`llamux: ${err.message}`);
    process.exit(1);
  }
}
