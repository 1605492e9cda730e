// Scripted models for the OpenAI-surface tests (structured output, logprobs, n, completions,
// tokenize, overflow). Each chat model has one chat script: ChatML prompts all end with the
// same newline token, which triggers the continuation.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { CHATML_TOOLS_TEMPLATE, SPACE, sp, writeScriptedModel, type ScriptedModelDescription, type ScriptedModelSpec } from '../../src/gguf/index.js';
import { fixturesDir } from '../helpers/paths.js';

export const chatPrompt = (user: string) => `<|im_start|>user\n${user}<|im_end|>\n<|im_start|>assistant\n`;

export const JSON_QUESTION = 'Weather as JSON';
/** The JSON the `surface-json` model writes (then " Done." unless a grammar ends it). */
export const WEATHER_JSON = '{"city":"Paris","temp":18}';
export const WEATHER_SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' }, temp: { type: 'integer' } },
  required: ['city', 'temp'],
  additionalProperties: false,
} as const;
export const STORY_PROMPT = 'Once upon a time';
export const STORY = ' there was a fox.';

const CHAT_SPECIAL = [
  { text: '<|im_start|>', type: 'CONTROL' as const },
  { text: '<|im_end|>', type: 'CONTROL' as const },
];

/** `surface-json`: a JSON answer followed by " Done."; a raw-text story script for /v1/completions. */
export const JSON_SPEC: ScriptedModelSpec = {
  name: 'surface-json',
  special: CHAT_SPECIAL,
  eos: '<|im_end|>',
  scripts: [
    { name: 'json', prompt: { text: chatPrompt(JSON_QUESTION) }, continuation: ['{"city":', '"Paris",', '"temp":', '18}', `${SPACE}Done.`] },
    { name: 'story', prompt: { text: STORY_PROMPT }, continuation: sp(' there| was| a| fox.') },
  ],
  extraWords: ['user', 'assistant', 'system', ...sp('Weather| as| JSON|Once| upon| a| time')],
  chatTemplate: CHATML_TOOLS_TEMPLATE,
};

export const COLOR_QUESTION = 'Pick a color';
/** `surface-color`: a near tie, "Red" (55 % at temperature 1) or "Blue" (45 %), then ".". */
export const COLOR_SPEC: ScriptedModelSpec = {
  name: 'surface-color',
  special: CHAT_SPECIAL,
  eos: '<|im_end|>',
  scripts: [{ name: 'color', prompt: { text: chatPrompt(COLOR_QUESTION) }, continuation: [{ token: 'Red', alt: ['Blue'] }, '.'] }],
  extraWords: ['user', 'assistant', 'system', ...sp('Pick| a| color')],
  chatTemplate: CHATML_TOOLS_TEMPLATE,
};

export interface SurfaceModels {
  json: ScriptedModelDescription;
  color: ScriptedModelDescription;
}

export async function ensureSurfaceModels(): Promise<SurfaceModels> {
  mkdirSync(fixturesDir, { recursive: true });
  const json = await writeScriptedModel(join(fixturesDir, 'surface-json.gguf'), JSON_SPEC);
  const color = await writeScriptedModel(join(fixturesDir, 'surface-color.gguf'), COLOR_SPEC);
  return { json, color };
}
