#!/usr/bin/env node
// Cross-builds llamux.node and its llama/ggml libraries for linux-arm64 on an x64 Linux
// machine, into build-arm64/Release (docs/deploy.md, "linux-arm64 cross build").
//
// Needs Debian's cross toolchain (apt-get install g++-aarch64-linux-gnu); the Node-API
// headers come from node_modules (node-api-headers, node-addon-api): Node-API is the same
// on every architecture, so nothing of Node for arm64 is needed to build.
//
// CPU backends: llama.cpp's arm64 list has eight variants, each a full compile of ggml's CPU
// code; this builds two of them, chosen at run time like the x86 ones:
//   armv8.0_1  any arm64 CPU (Raspberry Pi 3/4, Cortex-A53/A72, Graviton 1)
//   armv8.2_2  dotprod + fp16 arithmetic (Cortex-A76 and later, Graviton 2+, Ampere)
// LLAMUX_CPU_VARIANTS picks others ("armv8.2_2", or "all" for llama.cpp's eight).
//
// Environment: LLAMUX_CROSS_PREFIX (default aarch64-linux-gnu-), LLAMUX_BUILD_DIR (default
// build-arm64), and what scripts/build-native.mjs reads.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BuildError, build, buildDir, has } from './build-native.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const prefix = process.env.LLAMUX_CROSS_PREFIX ?? 'aarch64-linux-gnu-';

// CMake's usual cross setup: target system and compilers, libraries and headers found only
// under the cross sysroot, programs from the build machine.
function toolchainFile() {
  return `# written by scripts/cross-arm64.mjs
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER ${prefix}gcc)
set(CMAKE_CXX_COMPILER ${prefix}g++)
set(CMAKE_FIND_ROOT_PATH /usr/${prefix.replace(/-$/, '')})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
`;
}

function main() {
  if (process.platform !== 'linux') throw new BuildError('the arm64 cross build runs on Linux');
  if (!has(`${prefix}g++`)) {
    throw new BuildError(`${prefix}g++ not found: install the cross compiler (Debian/Ubuntu: apt-get install g++-aarch64-linux-gnu)`);
  }
  process.env.LLAMUX_BUILD_DIR ??= 'build-arm64';
  process.env.LLAMUX_CPU_VARIANTS ??= 'armv8.0_1,armv8.2_2';
  if (process.env.LLAMUX_NATIVE === '1' || process.env.LLAMUX_GPU) {
    throw new BuildError('the arm64 cross build is the portable CPU build: unset LLAMUX_NATIVE and LLAMUX_GPU');
  }
  const out = buildDir();
  mkdirSync(out, { recursive: true });
  const toolchain = join(out, 'toolchain-aarch64.cmake');
  writeFileSync(toolchain, toolchainFile());
  process.env.LLAMUX_CMAKE_ARGS = `CMAKE_TOOLCHAIN_FILE=${toolchain} ${process.env.LLAMUX_CMAKE_ARGS ?? ''}`.trim();
  const started = Date.now();
  const release = build();
  console.log(`llamux: linux-arm64 build in ${((Date.now() - started) / 1000).toFixed(0)} s: ${release.replace(`${root}/`, '')}`);
}

try {
  main();
} catch (err) {
  if (!(err instanceof BuildError)) throw err;
  console.error(`llamux: ${err.message}`);
  process.exit(1);
}
