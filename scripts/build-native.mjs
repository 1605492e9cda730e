#!/usr/bin/env node
// Builds the llamux addon from source with cmake-js against a static llama.cpp.
//
// llama.cpp comes from node-llama-cpp's git bundle (a pinned devDependency), cloned once
// into deps/llama.cpp (ignored by git), or from LLAMA_CPP_DIR when that is set.
// The cmake build folder (build/) is kept between runs, so rebuilds are incremental;
// ccache is used when it is installed.
//
// Environment:
//   LLAMA_CPP_DIR      use this llama.cpp checkout instead of cloning the bundle
//   LLAMUX_GPU=cuda    build with GGML_CUDA=ON
//   LLAMUX_PORTABLE=1  no -march=native (what prebuilds use)
//   LLAMUX_DEBUG=1     Debug build
//   LLAMUX_BUILD_DIR   cmake build folder (default build/)
//   LLAMUX_CMAKE_ARGS  extra cmake definitions ("GGML_OPENMP=OFF ...")
//   LLAMUX_SANITIZE=1  AddressSanitizer + UndefinedBehaviorSanitizer (llama.cpp and the addon)
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'package.json'));

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', cwd: root, ...opts });
  if (r.error) throw r.error;
  if (r.status !== 0) {
    console.error(`llamux: \`${cmd} ${args.join(' ')}\` failed with exit code ${r.status}`);
    process.exit(r.status ?? 1);
  }
}

function has(cmd) {
  return spawnSync(cmd, ['--version'], { stdio: 'ignore' }).status === 0;
}

// node-llama-cpp does not export its package.json, so look for the file where npm puts it.
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

export function llamaCppDir() {
  if (process.env.LLAMA_CPP_DIR) return resolve(process.env.LLAMA_CPP_DIR);
  const dir = join(root, 'deps', 'llama.cpp');
  if (existsSync(join(dir, 'CMakeLists.txt'))) return dir;
  const bundle = findBundle();
  if (!bundle) {
    console.error('llamux: no prebuilt binary fits this platform and llama.cpp sources are missing.\n' +
      'Install the devDependency node-llama-cpp (it carries the llama.cpp source bundle) or set LLAMA_CPP_DIR.');
    process.exit(1);
  }
  mkdirSync(join(root, 'deps'), { recursive: true });
  console.log(`llamux: cloning llama.cpp from ${bundle}`);
  run('git', ['-c', 'advice.detachedHead=false', 'clone', '--quiet', bundle, dir]);
  return dir;
}

function main() {
  const llama = llamaCppDir();
  const cmakeJs = join(dirname(require.resolve('cmake-js/package.json')), 'bin', 'cmake-js');
  const out = process.env.LLAMUX_BUILD_DIR || 'build';
  // configure every time (cheap on an existing cache, and it picks up changed options),
  // then build: ninja rebuilds only what changed.
  const args = ['--out', out, `--CDLLAMA_CPP_DIR=${llama}`];
  if (has('ninja')) args.push('--generator', 'Ninja');
  if (process.env.LLAMUX_DEBUG === '1') args.push('--debug');
  if (process.env.LLAMUX_GPU === 'cuda') args.push('--CDGGML_CUDA=ON');
  if (process.env.LLAMUX_PORTABLE === '1') {
    // Prebuilds run on other machines: fixed ISA flags instead of -march=native
    // (x86-64-v3: AVX2/FMA/F16C, what every x86 CPU of the last decade has).
    args.push('--CDGGML_NATIVE=OFF');
    if (process.arch === 'x64') args.push('--CDGGML_AVX=ON', '--CDGGML_AVX2=ON', '--CDGGML_FMA=ON', '--CDGGML_F16C=ON', '--CDGGML_BMI2=ON');
  }
  if (process.env.LLAMUX_BUILD_BENCH === '1') args.push('--CDLLAMUX_BUILD_BENCH=ON');
  // Extra cmake definitions, e.g. LLAMUX_CMAKE_ARGS="GGML_OPENMP=OFF GGML_CUDA=ON".
  for (const def of (process.env.LLAMUX_CMAKE_ARGS ?? '').split(/\s+/).filter(Boolean)) args.push(`--CD${def}`);
  if (process.env.LLAMUX_SANITIZE === '1') {
    args.push('--CDLLAMA_SANITIZE_ADDRESS=ON', '--CDLLAMA_SANITIZE_UNDEFINED=ON', '--CDLLAMUX_SANITIZE=ON', '--CDCMAKE_BUILD_TYPE=RelWithDebInfo');
  }
  run(process.execPath, [cmakeJs, 'configure', ...args]);
  run(process.execPath, [cmakeJs, 'build', ...args]);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
