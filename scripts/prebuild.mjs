#!/usr/bin/env node
// `npm run prebuild`: writes prebuilds/<platform>-<arch>/llamux.node, the layout
// node-gyp-build loads, using prebuildify with cmake-js in place of node-gyp.
//
// prebuildify spawns "node-gyp rebuild ..." in its --cwd and then copies
// <cwd>/build/Release/*.node into <out>/prebuilds/. We point --node-gyp at
// scripts/prebuild-node-gyp.mjs, which builds with cmake-js into build-prebuild/
// (portable ISA flags, no -march=native; kept apart so the dev build in build/ stays
// incremental) and places the addon where prebuildify looks for it.
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'package.json'));
const stage = join(root, 'build-prebuild', 'stage');
mkdirSync(stage, { recursive: true });
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
writeFileSync(join(stage, 'package.json'), JSON.stringify({ name: pkg.name, version: pkg.version, binary: pkg.binary }));
const shim = join(root, 'scripts', 'prebuild-node-gyp.mjs');
chmodSync(shim, 0o755);
const bin = join(dirname(require.resolve('prebuildify/package.json')), 'bin.js');
const r = spawnSync(process.execPath, [bin, '--napi', '--strip', '--name', pkg.name, '--cwd', stage, '--out', root, '--node-gyp', shim], {
  stdio: 'inherit',
  cwd: root,
});
process.exit(r.status ?? 1);
