#!/usr/bin/env node
// `npm run test:vulkan` (issue 28): builds ggml's Vulkan backend as a loadable library
// (build-vulkan/Release/libggml-vulkan.so, the file an @llamux/<platform>-vulkan package ships)
// and runs test/vulkan/ on a Vulkan device: in CI, Mesa's software device (lavapipe). Needs
//   apt-get install -y glslc libvulkan-dev spirv-headers mesa-vulkan-drivers
// Exits 2 with that hint when they are missing. Not part of `npm test`.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const has = (cmd) => spawnSync(cmd, ['--version'], { stdio: 'ignore' }).status === 0;
const missing = [];
if (!has('glslc')) missing.push('glslc');
if (!existsSync('/usr/include/vulkan/vulkan.h')) missing.push('libvulkan-dev');
if (!existsSync('/usr/share/cmake/SPIRV-Headers') && !existsSync('/usr/lib/cmake/SPIRV-Headers')) missing.push('spirv-headers');
if (!existsSync(`/usr/share/vulkan/icd.d/lvp_icd.${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}.json`)) missing.push('mesa-vulkan-drivers');
if (missing.length) {
  console.error(`test:vulkan needs ${missing.join(', ')}: apt-get install -y glslc libvulkan-dev spirv-headers mesa-vulkan-drivers`);
  process.exit(2);
}
const t0 = Date.now();
const env = { ...process.env, LLAMUX_GPU: 'vulkan', LLAMUX_BUILD_DIR: 'build-vulkan', LLAMUX_BUILD_TARGET: 'ggml-vulkan' };
let r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], { cwd: root, env, stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);
console.log(`test:vulkan: backend built in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
// vitest's bin through module resolution (the package exports no path to it)
const vitest = join(dirname(createRequire(join(root, 'package.json')).resolve('vitest/package.json')), 'vitest.mjs');
r = spawnSync(process.execPath, [vitest, 'run', '--config', 'vitest.vulkan.config.ts', ...process.argv.slice(2)], { cwd: root, stdio: 'inherit' });
process.exit(r.status ?? 1);
