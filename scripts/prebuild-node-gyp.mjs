#!/usr/bin/env node
// Stands in for node-gyp when prebuildify runs (see scripts/prebuild.mjs): ignores the
// node-gyp arguments, builds the addon with cmake-js and copies it to ./build/Release.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outDir = join(root, 'build-prebuild');
const env = { ...process.env, LLAMUX_PORTABLE: '1', LLAMUX_BUILD_DIR: outDir };
const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], { stdio: 'inherit', cwd: root, env });
if (r.status !== 0) process.exit(r.status ?? 1);
const dest = join(process.cwd(), 'build', 'Release');
mkdirSync(dest, { recursive: true });
copyFileSync(join(outDir, 'Release', 'llamux.node'), join(dest, 'llamux.node'));
