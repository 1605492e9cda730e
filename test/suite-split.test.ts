// `npm test` and `npm run test:slow` split the test files by one list (vitest.shared.ts). This
// checks the list names real test files, and that no file left in `npm test` runs a compiler, a
// build or packing script, or a registry: `npm test` must pass on a machine with the prebuilt
// addon and no compiler, in minutes.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SLOW_TEST_FILES } from '../vitest.shared.js';
import { projectRoot } from './helpers/paths.js';

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? testFiles(join(dir, e.name)) : e.name.endsWith('.test.ts') ? [relative(projectRoot, join(dir, e.name))] : [],
  );
}

/** What makes a test file slow-only: the reasons found in its source (empty: none). */
function buildsOrPublishes(source: string): string[] {
  const found: string[] = [];
  // a compiler or build tool run as a child process
  const tool = /\b(?:spawn|spawnSync|exec|execSync|execFile|execFileSync)\(\s*['"`](cmake|cmake-js|cc|c\+\+|gcc|g\+\+|clang|clang\+\+|ninja|make)['"`]/g;
  for (const m of source.matchAll(tool)) found.push(`runs ${m[1]}`);
  // the scripts that compile (build-native, prebuild, platform-packages) or pack (prepack)
  for (const m of source.matchAll(/\b(build-native|prebuild|prebuild-node-gyp|platform-packages|prepack|cross-arm64|test-asan|test-vulkan)\.mjs\b/g)) found.push(`uses scripts/${m[1]}.mjs`);
  // `npm pack` runs the prepack hook, which runs the prebuild
  if (/['"`]pack['"`]/.test(source)) found.push('runs npm pack');
  if (/\b(?:registryWithLlamux|startRegistry)\b/.test(source)) found.push('starts a registry');
  // the benchmark harness builds its raw llama.cpp decode loop on first use (bench/drivers/raw.ts)
  if (/['"`]bench['"`],\s*['"`]index\.ts['"`]|bench\/index\.ts/.test(source)) found.push('runs the benchmarks');
  return found;
}

describe('the split of the suite', () => {
  const all = testFiles(join(projectRoot, 'test'));
  const slow = new Set<string>(SLOW_TEST_FILES);

  it('lists only test files that exist, once each', () => {
    expect(SLOW_TEST_FILES.length).toBe(slow.size);
    for (const f of SLOW_TEST_FILES) expect(existsSync(join(projectRoot, f)), f).toBe(true);
    for (const f of SLOW_TEST_FILES) expect(all, f).toContain(f);
  });

  it('the detector finds the known builders', () => {
    const read = (f: string) => buildsOrPublishes(readFileSync(join(projectRoot, f), 'utf8'));
    expect(read('test/package/consumer.test.ts')).toContain('runs npm pack');
    expect(read('test/package/registry.test.ts')).toContain('starts a registry');
    expect(read('test/native/prebuild.test.ts')).toContain('uses scripts/prebuild.mjs');
    expect(read('test/native/amx-tilecfg.test.ts')).toContain('runs cmake');
    expect(read('test/package/gpu-package.test.ts')).toContain('runs cc');
    expect(read('test/bench/quick.test.ts')).toContain('runs the benchmarks');
    expect(buildsOrPublishes("spawnSync('g++', ['-O2'])")).toEqual(['runs g++']);
    expect(buildsOrPublishes("spawnSync('node', ['x'])")).toEqual([]);
  });

  it('leaves no compiler, build, pack or registry in `npm test`', () => {
    const offenders = all
      // (this file names the patterns it looks for)
      .filter((f) => !slow.has(f) && f !== relative(projectRoot, fileURLToPath(import.meta.url)))
      .map((f) => [f, buildsOrPublishes(readFileSync(join(projectRoot, f), 'utf8'))] as const)
      .filter(([, why]) => why.length > 0);
    expect(offenders).toEqual([]);
  });
});
