import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { SLOW_TEST_FILES, sharedTestOptions } from './vitest.shared.js';

/** Runs the files in the list's order: the first (`npm pack`) builds every shipped CPU variant
 * in build-prebuild/, which the later ones reuse (incrementally, or as they are). */
class ListOrder extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (f: TestSpecification) => SLOW_TEST_FILES.findIndex((p) => f.moduleId.endsWith(`/${p}`));
    return [...files].sort((a, b) => rank(a) - rank(b));
  }
}

// `npm run test:slow`: the test files `npm test` leaves out (vitest.shared.ts): source builds,
// the registry, the prebuild, and the long determinism sweeps.
export default defineConfig({
  test: {
    ...sharedTestOptions,
    include: [...SLOW_TEST_FILES],
    sequence: { sequencer: ListOrder },
  },
});
