import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Compile-only tests of the public types (test/types/*.test-d.ts).
    typecheck: { enabled: true, include: ['test/types/**/*.test-d.ts'], tsconfig: 'tsconfig.json' },
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Native engines own threads; forks keep a crash inside one file from taking the runner down.
    pool: 'forks',
    // llama.cpp's worker threads spin while they wait: two test files decoding at once on a
    // 2-core machine slow each other down 60-100x. One file at a time.
    fileParallelism: false,
    maxWorkers: 1,
  },
});
