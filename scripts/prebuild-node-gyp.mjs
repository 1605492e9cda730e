#!/usr/bin/env node
// Stands in for node-gyp when prebuildify runs (see scripts/prebuild.mjs): ignores the
// node-gyp arguments, builds the portable addon with cmake-js and puts it, with the shared
// libraries it loads (libllama, libggml, one CPU backend per ISA level), in ./build/Release
// where prebuildify picks them up.
import { copyFileSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

// A prebuild ships every CPU variant (LLAMUX_CPU_VARIANTS=shipped, whatever the environment
// says). A checkout's build/ has two of them (LLAMUX_CPU_VARIANTS=host), so the prebuild
// builds in build-prebuild/, where later prebuilds are incremental and the checkout's build/
// is left alone. build/ is reused only when it already holds exactly such a build (the
// shipped variants, not native, sanitized, debug or GPU).
const SHIPPED = ['alderlake', 'haswell', 'icelake', 'sapphirerapids', 'skylakex', 'sse42', 'x64', 'zen4'];
function reusable(dir) {
  try {
    const info = JSON.parse(readFileSync(join(dir, 'Release', 'llamux-build.json'), 'utf8'));
    const cpu = process.arch !== 'x64' || JSON.stringify(info.cpuVariants) === JSON.stringify(SHIPPED);
    return info.kind === 'variants' && !info.sanitize && !info.debug && !info.gpu && cpu;
  } catch {
    return false;
  }
}

const buildDir = reusable(join(root, 'build')) ? join(root, 'build') : join(root, 'build-prebuild');
process.env.LLAMUX_BUILD_DIR = buildDir;
process.env.LLAMUX_NATIVE = '0';
process.env.LLAMUX_CPU_VARIANTS = 'shipped';
delete process.env.LLAMUX_GPU;
delete process.env.LLAMUX_SANITIZE;
delete process.env.LLAMUX_DEBUG;
const { BuildError, build } = await import('./build-native.mjs');
let release;
try {
  release = build();
} catch (err) {
  if (!(err instanceof BuildError)) throw err;
  console.error(`llamux: ${err.message}`);
  process.exit(1);
}
const dest = join(process.cwd(), 'build', 'Release');
mkdirSync(dest, { recursive: true });
for (const f of readdirSync(release)) {
  if (f === 'llamux.node' || f === 'llamux-build.json' || /\.(so|dylib|dll)$/.test(f)) copyFileSync(join(release, f), join(dest, f));
}
