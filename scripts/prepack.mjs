#!/usr/bin/env node
// `npm pack` / `npm publish` hook: makes the package self-contained, so that an app that
// installs the tarball needs nothing but the npm registry.
//   1. dist/: the TypeScript build
//   2. deps/llama.cpp: the pinned llama.cpp source, pruned to what the library build needs
//      (scripts/build-native.mjs exports it; every ggml backend's source stays) with its licence
//   3. prebuilds/<platform>-<arch>/: the addon, libllama/libggml and every CPU variant
//      (`npm run prebuild`); LLAMUX_PACK_PREBUILDS=0 packs a source-only tarball
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BuildError, findLlamaCpp, llamaCppDefaultDir } from './build-native.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

function run(cmd, args) {
  // Child output to stderr: `npm pack --json` prints its JSON on stdout, after this hook.
  const r = spawnSync(cmd, args, { stdio: ['inherit', 2, 2], cwd: root });
  if (r.status !== 0) {
    console.error(`llamux prepack: \`${cmd} ${args.join(' ')}\` failed`);
    process.exit(r.status ?? 1);
  }
}

try {
  // typescript through module resolution, wherever the package manager put it
  const tsc = createRequire(join(root, 'package.json')).resolve('typescript/bin/tsc');
  run(process.execPath, [tsc, '-p', 'tsconfig.build.json']);
  const saved = process.env.LLAMA_CPP_DIR;
  delete process.env.LLAMA_CPP_DIR; // the tarball always carries the pinned release
  const llama = findLlamaCpp();
  if (saved !== undefined) process.env.LLAMA_CPP_DIR = saved;
  if (llama !== llamaCppDefaultDir) throw new BuildError('no llama.cpp source to bundle: run `npm install` in the checkout first');
  if (process.env.LLAMUX_PACK_PREBUILDS === '0') {
    rmSync(join(root, 'prebuilds'), { recursive: true, force: true });
  } else {
    run(process.execPath, [join(root, 'scripts', 'prebuild.mjs')]);
  }
  const pre = join(root, 'prebuilds');
  if (existsSync(pre)) {
    for (const p of readdirSync(pre)) console.error(`llamux prepack: prebuilds/${p}: ${readdirSync(join(pre, p)).join(', ')}`);
  }
} catch (err) {
  if (!(err instanceof BuildError)) throw err;
  console.error(`llamux prepack: ${err.message}`);
  process.exit(1);
}
