// Generates the scripted GGUF fixtures into an ignored folder once per run, before any test
// file runs, and hands their paths and descriptions to the tests (`inject('testModels')`, or
// `testModel(name)` from test/helpers/models.ts).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { ensureTestModels, type TestModelName } from '../src/gguf/fixtures.js';
import type { ScriptedModelDescription } from '../src/gguf/scripted.js';

/** What tests may know about one generated fixture (JSON-serializable). */
export interface ProvidedTestModel {
  readonly path: string;
  readonly description: ScriptedModelDescription;
}

declare module 'vitest' {
  export interface ProvidedContext {
    /** Folder of the generated fixtures (`<projectRoot>/.cache/test-models`). */
    testModelsDir: string;
    /** Every ready-made scripted fixture, by name. */
    testModels: Record<TestModelName, ProvidedTestModel>;
  }
}

const projectRoot = resolve(fileURLToPath(new URL('.', import.meta.url)), '..');
export const testModelsDir = join(projectRoot, '.cache', 'test-models');

/** What the tests read from llama.cpp's `models/`: the chat templates, and the vocab-only files
 * (with their tokenizer test vectors) that the scripted tests, the model zoo and the bounded
 * tokenizer's equality tests (llama-spm and phi-3: SPM) use. */
const LLAMA_CPP_TEST_FILES = [
  'models/templates',
  ...['qwen2', 'qwen35', 'gemma-4', 'llama-bpe', 'llama-spm', 'phi-3', 'bert-bge'].flatMap((v) => [
    `models/ggml-vocab-${v}.gguf`,
    `models/ggml-vocab-${v}.gguf.inp`,
    `models/ggml-vocab-${v}.gguf.out`,
  ]),
];

/** llama.cpp's chat templates and vocab-only files, from the bare clone of node-llama-cpp's
 * bundle that `npm install` made (scripts/build-native.mjs) into .cache/llama.cpp-models. */
function extractLlamaCppTestData(): void {
  const out = join(projectRoot, '.cache', 'llama.cpp-models');
  const files = LLAMA_CPP_TEST_FILES.map((f) => f.replace(/^models\//, ''));
  if (files.every((f) => existsSync(join(out, f)))) return;
  const git = join(projectRoot, '.cache', 'llama.cpp.git');
  const tmp = `${out}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const archive = spawnSync('git', ['--git-dir', git, 'archive', '--format=tar', 'HEAD', ...LLAMA_CPP_TEST_FILES], { maxBuffer: 1 << 30 });
  if (archive.status !== 0) throw new Error(`cannot extract llama.cpp's test data from ${git} (run npm install first): ${archive.stderr}`);
  const tar = spawnSync('tar', ['-x', '-C', tmp, '--strip-components=1'], { input: archive.stdout });
  if (tar.status !== 0) throw new Error(`cannot unpack llama.cpp's test data: ${tar.stderr}`);
  rmSync(out, { recursive: true, force: true });
  renameSync(tmp, out);
}

export default async function setup(project?: Pick<TestProject, 'provide'>): Promise<void> {
  extractLlamaCppTestData();
  const models = await ensureTestModels(testModelsDir);
  const provided = Object.fromEntries(
    Object.entries(models).map(([name, m]) => [name, { path: m.path, description: m.description }]),
  ) as Record<TestModelName, ProvidedTestModel>;
  project?.provide('testModelsDir', testModelsDir);
  project?.provide('testModels', provided);
}
