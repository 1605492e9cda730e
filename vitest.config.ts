import { configDefaults, defineConfig } from 'vitest/config';
import { SLOW_TEST_FILES, sharedTestOptions } from './vitest.shared.js';

// `npm test`: every test file but the slow ones (vitest.shared.ts), which `npm run test:slow` runs.
export default defineConfig({
  test: {
    ...sharedTestOptions,
    include: ['test/**/*.test.ts'],
    exclude: [...configDefaults.exclude, ...SLOW_TEST_FILES],
    // Compile-only tests of the public types (test/types/*.test-d.ts).
    typecheck: { enabled: true, include: ['test/types/**/*.test-d.ts'], tsconfig: 'tsconfig.json' },
  },
});
