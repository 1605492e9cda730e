#!/usr/bin/env node
// `npm install` hook: use a loadable prebuilt addon (prebuilds/ or an existing build/)
// when there is one, otherwise build from source. (node-gyp-build's own install command
// always runs node-gyp afterwards; we build with cmake-js instead.)
import { spawnSync } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const fromSource = process.env.npm_config_build_from_source === 'true' || process.env.LLAMUX_BUILD_FROM_SOURCE === '1';

function loads() {
  // In a child process, so a binary that crashes on load cannot take the installer down.
  const probe = `require(${JSON.stringify(join(root, 'node_modules', 'node-gyp-build'))})(${JSON.stringify(root)}).systemInfo()`;
  const r = spawnSync(process.execPath, ['-e', probe], { stdio: 'ignore' });
  return r.status === 0;
}

if (!fromSource && loads()) {
  console.log('llamux: using the existing native addon');
  process.exit(0);
}
const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], { stdio: 'inherit', cwd: root });
process.exit(r.status ?? 1);
