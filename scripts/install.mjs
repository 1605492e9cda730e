#!/usr/bin/env node
// `npm install` hook. In order:
//   1. a prebuilt binary that loads and runs here: the platform package @llamux/<platform>-<arch>
//      (an optional dependency npm installs only where its os/cpu/libc match), else
//      prebuilds/ (or an existing build/)
//   2. a build from source: the llama.cpp copy the package carries (vendor/llama.cpp), or
//      a checkout's deps/llama.cpp / node-llama-cpp bundle
//   3. one error that names the platform, what was tried and what to do
// LLAMUX_BUILD_FROM_SOURCE=1 (or npm's --build-from-source) skips 1; LLAMUX_GPU and
// LLAMUX_NATIVE imply it (a prebuild has neither).
// Everything is resolved from this package's own folder through normal module resolution,
// so it works wherever npm, pnpm or yarn put the package.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
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

/** @llamux/linux-x64 and the like (src/native/locate.ts has the same rule). */
export function platformPackageName() {
  const musl = process.platform === 'linux' && !process.report?.getReport()?.header?.glibcVersionRuntime;
  return `@llamux/${process.platform}-${process.arch}${musl ? '-musl' : ''}`;
}

/** The platform package's addon, or undefined when the package is not installed. */
export function platformAddon() {
  try {
    const dir = dirname(require.resolve(`${platformPackageName()}/package.json`));
    const file = join(dir, 'llamux.node');
    return existsSync(file) ? file : undefined;
  } catch {
    return undefined;
  }
}

/** The binary node-gyp-build would pick (prebuilds/ or build/), or why there is none. */
function nodeGypBuildPick(dir = root) {
  try {
    return { file: require('node-gyp-build').resolve(dir) };
  } catch (err) {
    return { why: String(err?.message ?? err).split('\n')[0] };
  }
}

/** Loads an addon file in a child process (a crash there cannot take the installer down)
 * and checks that a CPU backend runs. Returns why not, or undefined. */
export function probe(file) {
  const script = `
    const info = require(${JSON.stringify(file)}).systemInfo();
    if (info.backendError) { console.error(info.backendError); process.exit(3); }
    console.log(JSON.stringify({ variant: info.cpuVariant, kind: info.buildKind }));`;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
  if (r.status === 0) {
    try {
      const { variant, kind } = JSON.parse(r.stdout.trim().split('\n').pop());
      console.log(`llamux: using the prebuilt native addon ${file} (${kind}, CPU variant ${variant})`);
    } catch {
      console.log(`llamux: using the native addon ${file}`);
    }
    return undefined;
  }
  const why = (r.stderr || '').trim().split('\n').filter(Boolean);
  return why.find((l) => /No native build|Error:|error/i.test(l)) ?? why.pop() ?? `exit code ${r.status ?? r.signal}`;
}

/** The installed prebuilt addon that runs here, or a list of why not. */
function prebuilt(tried) {
  const pkg = platformAddon();
  if (pkg) {
    const why = probe(pkg);
    if (!why) return true;
    tried.push(`the platform package ${platformPackageName()}: ${why}`);
  } else {
    tried.push(`the platform package ${platformPackageName()}: not installed (optional dependencies omitted, or no package for this platform)`);
  }
  const pick = nodeGypBuildPick();
  if (pick.file) {
    const why = probe(pick.file);
    if (!why) return true;
    tried.push(`prebuilt binary ${pick.file}: ${why}`);
  } else {
    tried.push(`prebuilt binary in prebuilds/: ${pick.why}`);
  }
  return false;
}

function main() {
  const tried = [];
  if (!fromSource) {
    if (prebuilt(tried)) return 0;
  } else {
    tried.push('prebuilt binary: skipped (a source build was asked for)');
  }
  try {
    console.log('llamux: building the native addon from source (a few minutes; ccache makes rebuilds fast)');
    const release = build();
    const why = probe(join(release, 'llamux.node'));
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
      `  - install the prebuilt addon: npm install ${platformPackageName()} (or reinstall without --omit=optional / --no-optional)\n` +
      '  - install cmake (3.18+) and a C++17 compiler (build-essential, Xcode command line tools, or Visual Studio Build Tools), then reinstall\n' +
      '  - or force a source build: LLAMUX_BUILD_FROM_SOURCE=1 npm install llamux\n' +
      '  - for NVIDIA GPUs: LLAMUX_GPU=cuda npm install llamux (needs the CUDA toolkit)\n' +
      '  - see docs/troubleshooting.md',
  );
  return 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exit(main());
