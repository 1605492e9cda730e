#!/usr/bin/env node
// `npm run prebuild`: writes prebuilds/<platform>-<arch>/ in the layout node-gyp-build loads:
// llamux.glibc.node (or .musl), the shared libraries next to it (libllamux-llama,
// libllamux-ggml*, libggml-cpu-<variant> for each CPU variant, libggml-rpc) and
// llamux-build.json. prebuildify drives the build: it spawns "node-gyp rebuild" in --cwd,
// which --node-gyp points at scripts/prebuild-node-gyp.mjs (cmake-js instead of node-gyp),
// then copies build/Release/*.node and the shared libraries, stripped, into prebuilds/.
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'package.json'));
const stage = join(root, 'build-prebuild', 'stage');
rmSync(stage, { recursive: true, force: true });
mkdirSync(stage, { recursive: true });
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
writeFileSync(join(stage, 'package.json'), JSON.stringify({ name: pkg.name, version: pkg.version, binary: pkg.binary }));
const shim = join(root, 'scripts', 'prebuild-node-gyp.mjs');
chmodSync(shim, 0o755);
const target = join(root, 'prebuilds', `${process.platform}-${process.arch}`);
rmSync(target, { recursive: true, force: true });
const bin = join(dirname(require.resolve('prebuildify/package.json')), 'bin.js');
const args = [bin, '--napi', '--strip', '--name', pkg.name, '--cwd', stage, '--out', root, '--node-gyp', shim];
if (process.platform === 'linux') args.push('--tag-libc');
const r = spawnSync(process.execPath, args, { stdio: 'inherit', cwd: root });
if (r.status !== 0) process.exit(r.status ?? 1);
copyFileSync(join(stage, 'build', 'Release', 'llamux-build.json'), join(target, 'llamux-build.json'));
