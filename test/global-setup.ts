// Generates the scripted GGUF fixtures into an ignored folder once per run, before any test
// file runs, and hands their paths and descriptions to the tests (`inject('testModels')`, or
// `testModel(name)` from test/helpers/models.ts).
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

export default async function setup(project?: Pick<TestProject, 'provide'>): Promise<void> {
  const models = await ensureTestModels(testModelsDir);
  const provided = Object.fromEntries(
    Object.entries(models).map(([name, m]) => [name, { path: m.path, description: m.description }]),
  ) as Record<TestModelName, ProvidedTestModel>;
  project?.provide('testModelsDir', testModelsDir);
  project?.provide('testModels', provided);
}
