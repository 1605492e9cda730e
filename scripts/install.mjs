#!/usr/bin/env node
// `npm install` hook. In order:
//   1. a prebuilt binary from prebuilds/ (or an existing build/) that loads and runs here
//   2. a build from source: the llama.cpp copy the package carries (vendor/llama.cpp), or
//      a checkout's deps/llama.cpp / node-llama-cpp bundle
//   3. one error that names the platform, what was tried and what to do
// LLAMUX_BUILD_FROM_SOURCE=1 (or npm's --build-from-source) skips 1; LLAMUX_GPU and
// LLAMUX_NATIVE imply it (a prebuild has neither).
// Everything is resolved from this package's own folder through normal module resolution,
// so it works wherever npm, pnpm or yarn put the package.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BuildError, build } from './build-native.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'package.json'));
const platform = `${process.platform}-${process.arch}`;
const fromSource =
  process.env.npm_config_build_from_source === 'true' ||
  process.env.LLAMUX_BUILD_FROM_SOURCE === '1' ||
  Boolean(process.env.LLAMUX_GPU) ||
  process.env.LLAMUX_NATIVE === '1';

/** Loads the binary node-gyp-build would pick, in a child process (a crash there cannot take
 * the installer down), and checks that a CPU backend runs. Returns why not, or undefined. */
export function probe(dir = root) {
  let ngb;
  try {
    ngb = require.resolve('node-gyp-build');
  } catch {
    return 'the dependency node-gyp-build cannot be resolved';
  }
  const script = `
    const info = require(${JSON.stringify(ngb)})(${JSON.stringify(dir)}).systemInfo();
    if (info.backendError) { console.error(info.backendError); process.exit(3); }
    console.log(JSON.stringify({ variant: info.cpuVariant, kind: info.buildKind }));`;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
  if (r.status === 0) {
    try {
      const { variant, kind } = JSON.parse(r.stdout.trim().split('\n').pop());
      console.log(`llamux: using the prebuilt native addon (${kind}, CPU variant ${variant})`);
    } catch {
      console.log('llamux: using the existing native addon');
    }
    return undefined;
  }
  const why = (r.stderr || '').trim().split('\n').filter(Boolean);
  return why.find((l) => /No native build|Error:|error/i.test(l)) ?? why.pop() ?? `exit code ${r.status ?? r.signal}`;
}

function main() {
  const tried = [];
  if (!fromSource) {
    const why = probe();
    if (!why) return 0;
    tried.push(`prebuilt binary: ${why}`);
  } else {
    tried.push('prebuilt binary: skipped (a source build was asked for)');
  }
  try {
    console.log('llamux: building the native addon from source (a few minutes; ccache makes rebuilds fast)');
    build();
    const why = probe();
    if (!why) return 0;
    tried.push(`build from source: built, but the result does not load: ${why}`);
  } catch (err) {
    if (!(err instanceof BuildError)) throw err;
    tried.push(`build from source: ${err.message}`);
  }
  console.error(
    `llamux: no native addon for ${platform} (Node ${process.version}).\n` +
      `Tried:\n${tried.map((t) => `  - ${t}`).join('\n')}\n` +
      'What to do:\n' +
      '  - install cmake (3.18+) and a C++17 compiler (build-essential, Xcode command line tools, or Visual Studio Build Tools), then reinstall\n' +
      '  - or force a source build: LLAMUX_BUILD_FROM_SOURCE=1 npm install llamux\n' +
      '  - for NVIDIA GPUs: LLAMUX_GPU=cuda npm install llamux (needs the CUDA toolkit)\n' +
      '  - see docs/troubleshooting.md',
  );
  return 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exit(main());
