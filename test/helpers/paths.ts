import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const projectRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** Real Llama 2 SentencePiece tokenizer, random weights (shared, read-only). */
export const tinyModelPath = resolve(projectRoot, '..', 'shared', 'models', 'llama-2-tiny-random.gguf');
/** Ignored folder for generated fixtures. */
export const fixturesDir = join(projectRoot, '.cache', 'fixtures');

export function tempDir(name: string): string {
  const dir = join(projectRoot, '.cache', 'tmp', `${name}-${process.pid}-${Date.now()}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}
/** llama.cpp's own test data (chat templates, vocab-only GGUFs), extracted by the global setup
 * from the llama.cpp git bundle: the pruned deps/llama.cpp that builds and ships has no models/. */
export const llamaCppModelsDir = join(projectRoot, '.cache', 'llama.cpp-models');
