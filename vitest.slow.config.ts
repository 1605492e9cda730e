import { defineConfig } from 'vitest/config';
import { SLOW_TEST_FILES, sharedTestOptions } from './vitest.shared.js';

// `npm run test:slow`: the test files `npm test` leaves out (vitest.shared.ts): source builds,
// the registry, the prebuild, and the long determinism sweeps.
export default defineConfig({
  test: {
    ...sharedTestOptions,
    include: [...SLOW_TEST_FILES],
  },
});
