// The AMX tile configuration is stored whole before `ldtilecfg` (issue 13). GCC 12's dead-store
// elimination dropped the stores of the `colsb` and `rows` fields of ggml's 64-byte tile
// configuration (amx/mmq.cpp), so the tiles were configured with zero rows and every Q8_0
// batch of 2+ tokens segfaulted on AMX CPUs. llamux compiles that file with -fno-dse
// -fno-tree-dse. This reads the shipped AMX variant's machine code, so it checks the fix on any
// CPU, AMX or not: before each ldtilecfg, besides zeroing the 64 bytes and setting palette_id,
// the code must store colsb (bytes 16..47) and rows (bytes 48..63).
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { native } from '../../src/native/binding.js';
import { projectRoot } from '../helpers/paths.js';
// @ts-expect-error the build script is plain JavaScript
import { findLlamaCpp } from '../../scripts/build-native.mjs';

const info = native.systemInfo();
const shippedLib = join(info.backendDirectory || join(projectRoot, 'build', 'Release'), 'libggml-cpu-sapphirerapids.so');

/** The prebuild's copy (build-prebuild/, where `npm pack` and `npm run prebuild` build every
 * shipped variant; `npm run test:slow` runs those before this file), unless it is older than
 * the build files or the source it compiles. */
function prebuiltLibrary(): string | undefined {
  const lib = join(projectRoot, 'build-prebuild', 'Release', 'libggml-cpu-sapphirerapids.so');
  if (!existsSync(lib)) return undefined;
  const llama = findLlamaCpp({ make: false }) as string | undefined;
  const inputs = [join(projectRoot, 'CMakeLists.txt'), ...(llama ? [join(llama, 'ggml', 'src', 'ggml-cpu', 'amx', 'mmq.cpp')] : [])];
  return inputs.every((f) => existsSync(f) && statSync(f).mtimeMs <= statSync(lib).mtimeMs) ? lib : undefined;
}

/** The AMX variant as the prebuilds ship it. A build of the shipped variants has it next to the
 * addon, and the prebuild's build folder has it; a checkout builds only x64 and this CPU's best
 * (LLAMUX_CPU_VARIANTS=host), so otherwise this builds that one library with the same
 * CMakeLists.txt in build-amx/ (incremental, and ccache serves it from any earlier build of the
 * same sources). */
function amxLibrary(): string {
  if (existsSync(shippedLib)) return shippedLib;
  const prebuilt = prebuiltLibrary();
  if (prebuilt) return prebuilt;
  const out = join(projectRoot, 'build-amx');
  const env = { ...process.env, CCACHE_BASEDIR: process.env.CCACHE_BASEDIR ?? projectRoot };
  const ninja = spawnSync('ninja', ['--version']).status === 0 ? ['-G', 'Ninja'] : [];
  const steps = [
    ['-S', projectRoot, '-B', out, ...ninja, `-DLLAMA_CPP_DIR=${findLlamaCpp({ make: false }) as string}`, '-DCMAKE_BUILD_TYPE=Release',
      '-DLLAMUX_CPU_VARIANTS=sapphirerapids', '-DGGML_CUDA=OFF', '-DGGML_VULKAN=OFF', '-DGGML_METAL=OFF'],
    ['--build', out, '--target', 'ggml-cpu-sapphirerapids'],
  ];
  for (const args of steps) {
    const r = spawnSync('cmake', args, { cwd: projectRoot, env, encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
    expect(r.status, `cmake ${args.join(' ')}:\n${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`).toBe(0);
  }
  return join(out, 'Release', 'libggml-cpu-sapphirerapids.so');
}

/** Stack offsets written before each `ldtilecfg OFF(%rsp)`, relative to OFF, with sizes. */
function tileConfigStores(disassembly: string): Array<{ site: string; stores: Array<{ at: number; size: number }> }> {
  const lines = disassembly.split('\n');
  const out: Array<{ site: string; stores: Array<{ at: number; size: number }> }> = [];
  lines.forEach((line, i) => {
    const m = /ldtilecfg\s+(?:0x([0-9a-f]+))?\(%rsp\)/.exec(line);
    if (!m) return;
    const base = m[1] ? parseInt(m[1], 16) : 0;
    const stores: Array<{ at: number; size: number }> = [];
    for (let j = i - 1; j >= Math.max(0, i - 80) && !/^[0-9a-f]+ <.*>:$/.test(lines[j]!); j--) {
      const s = /\b(movb|movw|movl|movq|mov|vmovdqa64|vmovdqu64|vmovdqa|vmovdqu|vmovdqa32|vmovdqu8)\s+(%[a-z0-9]+|\$0x[0-9a-f]+),(?:0x([0-9a-f]+))?\(%rsp\)/.exec(lines[j]!);
      if (!s) continue;
      const reg = s[2]!;
      const size = s[1] === 'movb' ? 1 : s[1] === 'movw' ? 2 : s[1] === 'movl' ? 4 : reg.startsWith('%zmm') ? 64 : reg.startsWith('%ymm') ? 32 : reg.startsWith('%xmm') ? 16 : reg.startsWith('%r') && !reg.endsWith('d') ? 8 : 4;
      stores.push({ at: (s[3] ? parseInt(s[3], 16) : 0) - base, size });
    }
    out.push({ site: line.trim(), stores });
  });
  return out;
}

const covers = (stores: Array<{ at: number; size: number }>, from: number, to: number): boolean =>
  stores.some((s) => s.at >= from && s.at + s.size <= to && !(s.at === 0 && s.size === 64));

describe('the AMX CPU variant', () => {
  it('stores the whole tile configuration before every ldtilecfg', { timeout: 20 * 60_000 }, () => {
    if (info.buildKind !== 'variants') {
      // a native build has AMX code only when built on an AMX CPU; nothing to read here
      expect(existsSync(shippedLib)).toBe(false);
      return;
    }
    const lib = amxLibrary();
    expect(existsSync(lib)).toBe(true);
    const r = spawnSync('objdump', ['-d', '--no-show-raw-insn', lib], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
    expect(r.status, 'objdump (binutils) must be installed').toBe(0);
    const sites = tileConfigStores(r.stdout);
    expect(sites.length).toBeGreaterThan(0);
    for (const { site, stores } of sites) {
      expect(covers(stores, 16, 48), `colsb stored before ${site}`).toBe(true);
      expect(covers(stores, 48, 64), `rows stored before ${site}`).toBe(true);
    }
  });

  it('recognises the broken code GCC 12 made without -fno-dse', () => {
    // The disassembly of mmq.cpp built without the flags (GCC 12.2, sapphirerapids variant):
    // the 64 bytes are zeroed and palette_id set, but colsb and rows are never stored.
    const broken = [
      '000000000002fe00 <_ZL7mmqfn>:',
      '   2ff52:\tvmovdqa64 %zmm0,0xc0(%rsp)',
      '   2ff5a:\tmovb   $0x1,0xc0(%rsp)',
      '   2ff62:\tldtilecfg 0xc0(%rsp)',
    ].join('\n');
    const [site] = tileConfigStores(broken);
    expect(covers(site!.stores, 16, 48)).toBe(false);
    const fixed = broken.replace('   2ff62:', '   2ff5e:\tmov    %rdx,0xf0(%rsp)\n   2ff5f:\tvmovdqa %xmm0,0xd0(%rsp)\n   2ff62:');
    const [ok] = tileConfigStores(fixed);
    expect(covers(ok!.stores, 16, 48) && covers(ok!.stores, 48, 64)).toBe(true);
  });
});
