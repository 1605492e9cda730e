#!/usr/bin/env node
// `npm run packages`: the packages a registry gets (issue 28), the pattern esbuild and
// @parcel/watcher use:
//   llamux                        JavaScript, the pruned llama.cpp source (the source-build
//                                 fallback), and an optional dependency on every platform package
//   @llamux/<platform>-<arch>     the addon, libllama/libggml, every CPU variant and the RPC
//                                 backend, with os/cpu/libc fields: npm, pnpm and yarn install
//                                 only the one that matches
//   @llamux/<platform>-<arch>-<gpu>  opt-in: one ggml GPU backend library (vulkan, cuda),
//                                 loaded beside the addon's after a check in a child process
//
// Usage:
//   node scripts/platform-packages.mjs [--out build-packages] [--skip-prebuild]
//        [--gpu vulkan=build-vulkan/Release] [--gpu cuda=build-cuda/Release]
// Writes <out>/<package folder>/ for each package and <out>/<name>-<version>.tgz (npm pack of
// each), and prints one JSON line: the tarballs, their packed and unpacked sizes.
// Every prebuilds/<platform>-<arch>/ folder becomes a platform package (a release gathers them
// from each platform's runner first); the current one is built with `npm run prebuild` unless
// --skip-prebuild. A GPU backend folder is a build's Release folder
// (`LLAMUX_GPU=vulkan LLAMUX_BUILD_DIR=build-vulkan LLAMUX_BUILD_TARGET=ggml-vulkan npm run build:native`).
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const { values } = parseArgs({
  options: {
    out: { type: 'string', default: 'build-packages' },
    'skip-prebuild': { type: 'boolean', default: false },
    gpu: { type: 'string', multiple: true, default: [] },
  },
});
const out = resolve(root, values.out);

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { cwd: root, encoding: 'utf8', maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'inherit'], ...opts });
  if (r.status !== 0) {
    console.error(`platform-packages: \`${cmd} ${args.join(' ')}\` failed (${r.status ?? r.signal})\n${r.stdout ?? ''}`);
    process.exit(1);
  }
  return r.stdout;
}

// node's platform-arch to npm's os/cpu fields; the libc tag from prebuildify's file name.
function platformFields(folder, files) {
  const [os, cpu] = folder.split('-');
  const fields = { os: [os], cpu: [cpu] };
  if (os === 'linux') fields.libc = [files.some((f) => f.includes('.musl.')) ? 'musl' : 'glibc'];
  return fields;
}

function platformName(folder, fields) {
  return `@llamux/${folder}${fields.libc?.[0] === 'musl' ? '-musl' : ''}`;
}

const common = {
  version: pkg.version,
  license: pkg.license,
  repository: pkg.repository,
  homepage: pkg.homepage,
};

function writePackage(dir, manifest) {
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  copyFileSync(join(root, 'LICENSE'), join(dir, 'LICENSE'));
}

function licenses(dir) {
  // the binaries are llama.cpp/ggml compiled: their licence travels with them
  copyFileSync(join(root, 'deps', 'llama.cpp', 'LICENSE'), join(dir, 'LICENSE-llama.cpp'));
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

// 1. The platform packages, from prebuilds/.
const current = `${process.platform}-${process.arch}`;
if (!values['skip-prebuild'] || !existsSync(join(root, 'prebuilds', current))) {
  run(process.execPath, [join(root, 'scripts', 'prebuild.mjs')], { stdio: ['ignore', 2, 'inherit'] });
}
const platforms = [];
for (const folder of readdirSync(join(root, 'prebuilds')).sort()) {
  const src = join(root, 'prebuilds', folder);
  const files = readdirSync(src);
  const addon = files.find((f) => f.endsWith('.node'));
  if (!addon) continue;
  const fields = platformFields(folder, files);
  const name = platformName(folder, fields);
  const dir = join(out, name.replace('/', '+'));
  mkdirSync(dir, { recursive: true });
  // one name on every platform: src/native/locate.ts loads <package>/llamux.node
  for (const f of files) copyFileSync(join(src, f), join(dir, f === addon ? 'llamux.node' : f));
  licenses(dir);
  writePackage(dir, {
    name,
    ...common,
    description: `The llamux native addon for ${folder}${fields.libc ? ` (${fields.libc[0]})` : ''}: llama.cpp, ggml's CPU variants and RPC backend. Installed by llamux as an optional dependency.`,
    ...fields,
    files: ['*.node', '*.so', '*.dylib', '*.dll', '*.json', 'LICENSE*'],
    preferUnplugged: true,
  });
  platforms.push({ name, folder, fields, dir });
}
if (!platforms.length) {
  console.error('platform-packages: no prebuilds/<platform>-<arch>/ folder with an addon');
  process.exit(1);
}

// 2. GPU packages: one backend library each, for the current platform's package.
const gpus = [];
for (const spec of values.gpu) {
  const [backend, from] = spec.split('=');
  const base = platforms.find((p) => p.folder === current);
  if (!backend || !from || !base) {
    console.error(`platform-packages: --gpu ${spec}: expected <backend>=<folder> and a prebuild for ${current}`);
    process.exit(1);
  }
  const library = readdirSync(resolve(root, from)).find((f) => new RegExp(`^(lib)?ggml-${backend}\\.(so|dll|dylib)$`).test(f));
  if (!library) {
    console.error(`platform-packages: no ggml-${backend} library in ${from}`);
    process.exit(1);
  }
  const name = `${base.name}-${backend}`;
  const dir = join(out, name.replace('/', '+'));
  mkdirSync(dir, { recursive: true });
  copyFileSync(resolve(root, from, library), join(dir, library));
  // as prebuildify --strip does for the platform packages (where there is a strip)
  if (process.platform !== 'win32') spawnSync('strip', [process.platform === 'darwin' ? '-x' : '--strip-unneeded', join(dir, library)], { stdio: 'ignore' });
  licenses(dir);
  writePackage(dir, {
    name,
    ...common,
    description: `The ${backend} GPU backend for llamux on ${current}: install it next to llamux to offload layers to the GPU.`,
    ...base.fields,
    files: ['*.so', '*.dll', '*.dylib', 'LICENSE*'],
    // the backend library is built against this exact ggml: it runs with this llamux only
    peerDependencies: { [pkg.name]: pkg.version },
    llamux: { backend, library },
    preferUnplugged: true,
  });
  gpus.push({ name, dir });
}

// 3. The main package: what `npm pack` would ship, less prebuilds/, plus the optional
// dependencies. `npm pack --dry-run --ignore-scripts` lists the files without running prepack.
run(process.execPath, [createRequire(join(root, 'package.json')).resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json']);
if (!existsSync(join(root, 'deps', 'llama.cpp', 'llamux-source.json'))) {
  console.error('platform-packages: deps/llama.cpp is missing: run `npm install` (or `npm run build:native`) first');
  process.exit(1);
}
const listing = JSON.parse(run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts']));
const mainDir = join(out, pkg.name);
for (const { path } of listing[0].files) {
  if (path.startsWith('prebuilds/') || path === 'package.json') continue;
  mkdirSync(dirname(join(mainDir, path)), { recursive: true });
  copyFileSync(join(root, path), join(mainDir, path));
}
const manifest = { ...pkg };
manifest.files = pkg.files.filter((f) => f !== 'prebuilds');
// a published package runs only its install step; the rest are the checkout's
manifest.scripts = { install: pkg.scripts.install };
delete manifest.devDependencies;
delete manifest.overrides; // the checkout's (verdaccio's audit plugin)
manifest.optionalDependencies = Object.fromEntries(platforms.map((p) => [p.name, pkg.version]));
// optional peers: pnpm links an app's GPU package into llamux's own node_modules
const gpuNames = ['cuda', 'vulkan'].flatMap((b) => platforms.map((p) => `${p.name}-${b}`));
manifest.peerDependencies = { ...pkg.peerDependencies, ...Object.fromEntries(gpuNames.map((n) => [n, pkg.version])) };
manifest.peerDependenciesMeta = { ...pkg.peerDependenciesMeta, ...Object.fromEntries(gpuNames.map((n) => [n, { optional: true }])) };
writeFileSync(join(mainDir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);

// 4. Tarballs.
const report = [];
for (const dir of [mainDir, ...platforms.map((p) => p.dir), ...gpus.map((g) => g.dir)]) {
  const [info] = JSON.parse(run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', out, dir]));
  report.push({ name: info.name, tarball: join(out, info.filename), size: info.size, unpackedSize: info.unpackedSize, files: info.entryCount });
  console.error(`platform-packages: ${info.name}@${info.version}: ${(info.size / 1e6).toFixed(1)} MB packed, ${(info.unpackedSize / 1e6).toFixed(1)} MB unpacked, ${info.entryCount} files`);
}
console.log(JSON.stringify({ out, packages: report }));
