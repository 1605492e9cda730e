// The model zoo (src/gguf/zoo), generated once into .cache/zoo and reused while its inputs are
// unchanged (files are keyed by a hash of the generator, the family and the vocab/template files).
import { join } from 'node:path';
import { ensureZooModels, type ZooArchitecture, type ZooModelDescription } from '../../src/gguf/index.js';
import { llamaCppModelsDir, projectRoot } from './paths.js';

export const zooDir = join(projectRoot, '.cache', 'zoo');

/** Every zoo model (or the ones named), generating what is missing. Needs the global setup's
 * extraction of llama.cpp's vocab files and templates. */
export function zooModels(
  architectures?: readonly ZooArchitecture[],
  blockType?: 'F32' | 'F16' | 'Q8_0',
): Promise<Record<ZooArchitecture, ZooModelDescription>> {
  return ensureZooModels(zooDir, { vocabDir: llamaCppModelsDir, ...(architectures ? { architectures } : {}), ...(blockType ? { blockType } : {}) });
}
