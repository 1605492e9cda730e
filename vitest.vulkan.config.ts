import { defineConfig } from 'vitest/config';

// `npm run test:vulkan` (scripts/test-vulkan.mjs): not part of `npm test`, which runs on a bare
// machine. Needs the Vulkan backend built and a Vulkan device (lavapipe in CI).
export default defineConfig({
  test: {
    include: ['test/vulkan/**/*.vulkan-test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    fileParallelism: false,
    maxWorkers: 1,
  },
});
