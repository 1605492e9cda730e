// Scripted models for the reasoning and call-format tests: each family's real chat template,
// scripts whose greedy output is a known reasoning span followed by an answer or a call.
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { buildScriptedModel, encodeGguf, sp, writeBytesAtomic, type ScriptedModelSpec } from '../../src/gguf/index.js';
import { ChatTemplate } from '../../src/chat/index.js';
import { fixturesDir } from '../helpers/paths.js';
import { readTemplate } from '../server/fixtures.js';

export const QWEN_QUESTION = 'What is 2+2?';
/** What the Qwen3.5 template renders for the question (thinking on: the prompt opens `<think>`). */
export const QWEN_THINK_PROMPT = `<|im_start|>user\n${QWEN_QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>\n`;
export const QWEN_REASONING = ' Two plus two is four.';
export const QWEN_ANSWER = ' The answer equals 4.';
/** The server's `content` for it: after a reasoning span the answer starts at its first non-blank character. */
export const QWEN_CONTENT = QWEN_ANSWER.trimStart();

/**
 * `qwen35-think`: the Qwen3.5 chat template; after the template's `<think>\n` the model reasons
 * "Two plus two is four." (with a near tie on "four."), closes `</think>` and answers "The answer is 4.".
 */
export function qwenThinkSpec(): ScriptedModelSpec {
  return {
    name: 'qwen35-think',
    special: [
      { text: '<|im_start|>', type: 'CONTROL' },
      { text: '<|im_end|>', type: 'CONTROL' },
      { text: '<tool_call>', type: 'USER_DEFINED' },
      { text: '</tool_call>', type: 'USER_DEFINED' },
      { text: '<tool_response>', type: 'USER_DEFINED' },
      { text: '</tool_response>', type: 'USER_DEFINED' },
      { text: '<think>', type: 'USER_DEFINED' },
      { text: '</think>', type: 'USER_DEFINED' },
    ],
    eos: '<|im_end|>',
    scripts: [
      {
        name: 'think-answer',
        prompt: { text: QWEN_THINK_PROMPT },
        continuation: [...sp(' Two| plus| two| is'), { token: '▁four.', alt: ['▁4!'] }, '</think>', ...sp(' The| answer| equals| 4.')],
      },
    ],
    extraWords: ['user', 'assistant', 'system'],
    chatTemplate: readTemplate('Qwen3.5-4B'),
  };
}

function sameBytes(path: string, bytes: Uint8Array): boolean {
  try {
    return statSync(path).size === bytes.length && Buffer.compare(readFileSync(path), bytes) === 0;
  } catch {
    return false;
  }
}

/** Writes (if missing or changed) a scripted fixture; returns its path. */
export async function ensureFormatModel(spec: ScriptedModelSpec): Promise<string> {
  mkdirSync(fixturesDir, { recursive: true });
  const path = join(fixturesDir, `${spec.name}.gguf`);
  const bytes = encodeGguf(buildScriptedModel(spec).gguf);
  if (!sameBytes(path, bytes)) await writeBytesAtomic(path, bytes);
  return path;
}

export const WEATHER_QUESTION = 'Weather in Paris?';
/** get_weather(city: string, days: integer) in the chat template's shape. */
export const XML_TOOLS = [
  {
    name: 'get_weather',
    description: 'Weather forecast',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
];
export const XML_REASONING = ' Need the forecast.';
/** The span body (between `<tool_call>` and `</tool_call>`) the model writes. */
export const XML_SPAN = '\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n';

/**
 * `qwen35-xml`: the Qwen3.5 template with tools; after `<think>\n` the model reasons, closes the
 * span and calls get_weather in the XML syntax (city "Paris", near tie "Lyon"; days 3).
 */
export function qwenXmlSpec(): ScriptedModelSpec {
  const template = readTemplate('Qwen3.5-4B');
  const prompt = new ChatTemplate(template, { bosToken: '', eosToken: '<|im_end|>' }).render([{ role: 'user', content: WEATHER_QUESTION }], { tools: XML_TOOLS });
  return {
    ...qwenThinkSpec(),
    name: 'qwen35-xml',
    scripts: [
      {
        name: 'think-call',
        prompt: { text: prompt },
        continuation: [
          ...sp(' Need| the| forecast.'),
          '</think>',
          '<tool_call>',
          '\n<function=get_weather>\n',
          '<parameter=city>\n',
          { token: 'Paris', alt: ['Lyon'] },
          '\n</parameter>\n<parameter=days>\n',
          '3',
          '\n</parameter>\n</function>\n',
          '</tool_call>',
        ],
      },
    ],
    extraWords: ['user', 'assistant', 'system'],
    chatTemplate: template,
  };
}

/**
 * `qwen35-xml-replay`: like `qwen35-xml`, but the reasoning is written the way the template
 * renders it back (`Need the forecast.\n` then `</think>`), so a client that sends
 * `reasoning_content` back gets a prompt that extends the generated tokens past the reasoning.
 */
export function qwenXmlReplaySpec(): ScriptedModelSpec {
  const base = qwenXmlSpec();
  const script = base.scripts[0]!;
  return {
    ...base,
    name: 'qwen35-xml-replay',
    scripts: [{ ...script, continuation: ['Need', '▁the', '▁forecast.\n', ...script.continuation.slice(3)] }],
  };
}
