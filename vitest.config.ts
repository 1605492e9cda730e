import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Native engines own threads; forks keep a crash inside one file from taking the runner down.
    pool: 'forks',
    maxWorkers: 2,
  },
});
