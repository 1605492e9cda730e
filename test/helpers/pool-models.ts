// Several small scripted chat models for the model-pool and router tests: each answers the
// same ChatML question with its own sentence, so a test can tell which model answered.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CHATML_TOOLS_TEMPLATE, sp, writeScriptedModel, type ScriptedModelSpec } from '../../src/gguf/index.js';

export const POOL_QUESTION = 'Who are you?';
/** The ChatML prompt the server renders for one user message `POOL_QUESTION`. */
export const POOL_PROMPT = `<|im_start|>user\n${POOL_QUESTION}<|im_end|>\n<|im_start|>assistant\n`;

/** The greedy answer of the pool model `name`. */
export function answerOf(name: string): string {
  return `I am ${name}, at your service.`;
}

function specOf(name: string, seed: number): ScriptedModelSpec {
  return {
    name,
    seed,
    special: [
      { text: '<|im_start|>', type: 'CONTROL' },
      { text: '<|im_end|>', type: 'CONTROL' },
    ],
    eos: '<|im_end|>',
    scripts: [{ name: 'main', prompt: { text: POOL_PROMPT }, continuation: sp(`I| am| ${name},| at| your| service.`) }],
    extraWords: ['user', 'assistant', 'system', 'Who', ...sp(' are| you?')],
    chatTemplate: CHATML_TOOLS_TEMPLATE,
  };
}

/** Writes a scripted model answering `answerOf(name)` at `path`. */
export async function writePoolModel(path: string, name: string, seed = 1): Promise<void> {
  await writeScriptedModel(path, specOf(name, seed));
}

export interface PoolFolder {
  readonly dir: string;
  /** name → file */
  readonly paths: Record<string, string>;
  remove(): void;
}

/** A fresh temporary folder with one `<name>.gguf` per name. */
export async function poolFolder(names: readonly string[]): Promise<PoolFolder> {
  const dir = mkdtempSync(join(tmpdir(), 'llamux-pool-'));
  const paths: Record<string, string> = {};
  for (const [i, name] of names.entries()) {
    paths[name] = join(dir, `${name}.gguf`);
    await writePoolModel(paths[name], name, 100 + i);
  }
  return { dir, paths, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
