// What `npm test` (vitest.config.ts) and `npm run test:slow` (vitest.slow.config.ts) share: the
// fixtures' global setup, the pool settings, and the one list that splits the suite. `npm test`
// runs every test file except SLOW_TEST_FILES; `npm run test:slow` runs exactly those, so a file
// is in one of the two and never in neither (test/suite-split.test.ts checks the list).
import type { TestUserConfig } from 'vitest/config';

/** Test files that compile, publish to a registry, or sweep the long determinism matrices: not in
 * `npm test` (no compiler runs there, and it takes minutes), run by `npm run test:slow` in this
 * order (the first builds every shipped CPU variant in build-prebuild/ for the ones after it). */
export const SLOW_TEST_FILES = [
  // `npm pack` runs prepack, which builds the eight shipped CPU variants (scripts/prebuild.mjs),
  // then installs the tarball four ways, one of them a source build (LLAMUX_BUILD_FROM_SOURCE=1)
  'test/package/consumer.test.ts',
  // a private verdaccio registry; scripts/platform-packages.mjs runs the prebuild (a compile)
  'test/package/registry.test.ts',
  // runs scripts/prebuild.mjs: cmake builds of every shipped CPU variant in build-prebuild/
  'test/native/prebuild.test.ts',
  // builds the sapphirerapids variant with cmake when the checkout's build lacks it (a checkout
  // builds x64 and this CPU's best only)
  'test/native/amx-tilecfg.test.ts',
  // compiles stand-in GPU backend libraries with cc
  'test/package/gpu-package.test.ts',
  // runs the benchmarks, which build bench/native/raw_decode.cc (build-native.mjs with
  // LLAMUX_BUILD_BENCH=1) when the build lacks it, as `npm install` leaves it
  'test/bench/quick.test.ts',
  // issue 41's agent-traffic and correctness suites in quick mode: 12-60 s each here
  'test/bench/agents.test.ts',
  // issue 37's multimodal suite in quick mode: tens of seconds on a shared machine
  'test/bench/multimodal.test.ts',
  // Qwen-VL outputs against llama-server, which a fresh checkout builds first (minutes)
  'test/api/multimodal-qwen3vl-llama-server.test.ts',
  // the cache-path determinism sweep on the 250 M model (paths.test.ts runs it on the tiny shape)
  'test/determinism/paths-250m.test.ts',
  // the same sweep over six zoo architectures
  'test/determinism/paths-zoo.test.ts',
] as const;

/** The settings both configurations run under. */
export const sharedTestOptions = {
  globalSetup: ['test/global-setup.ts'],
  testTimeout: 60_000,
  hookTimeout: 120_000,
  // Native engines own threads; forks keep a crash inside one file from taking the runner down.
  pool: 'forks',
  // llama.cpp's worker threads spin while they wait: two test files decoding at once on a
  // 2-core machine slow each other down 60-100x. One file at a time.
  fileParallelism: false,
  maxWorkers: 1,
} as const satisfies TestUserConfig;
