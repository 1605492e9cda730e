// Scripted chat models for the chat, agent, server and CLI tests.
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import {
  CHATML_TOOLS_TEMPLATE,
  buildScriptedModel,
  encodeGguf,
  ensureTestModels,
  sp,
  SPACE,
  writeBytesAtomic,
  type ScriptedModelSpec,
} from '../../src/gguf/index.js';
import { fixturesDir, llamaCppModelsDir, projectRoot } from '../helpers/paths.js';

export const templatesDir = join(llamaCppModelsDir, 'templates');

export function readTemplate(name: string): string {
  return readFileSync(join(templatesDir, `${name}.jinja`), 'utf8');
}

const TURN1_PROMPT = '<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n';
const TURN2_PROMPT = `${TURN1_PROMPT}<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>{"temperature": 18}</tool_response><|im_end|>\n<|im_start|>assistant\n`;

/**
 * `parallel-calls`: like `demo`, but turn 1 is two calls, `get_weather` {"city": "Paris"} and
 * `get_time` {"tz": "CET"}, separated by a newline and followed by " Done."; turn 2 (a
 * `<tool_response>` in the prompt) answers in text.
 */
export const PARALLEL_SPEC: ScriptedModelSpec = {
  name: 'parallel-calls',
  special: [
    { text: '<|im_start|>', type: 'CONTROL' },
    { text: '<|im_end|>', type: 'CONTROL' },
    { text: '<tool_call>', type: 'USER_DEFINED' },
    { text: '</tool_call>', type: 'USER_DEFINED' },
    { text: '<tool_response>', type: 'USER_DEFINED' },
    { text: '</tool_response>', type: 'USER_DEFINED' },
  ],
  eos: '<|im_end|>',
  scripts: [
    {
      name: 'turn1',
      prompt: { text: TURN1_PROMPT },
      continuation: [
        '<tool_call>', '{"name":', `${SPACE}"get_weather",`, `${SPACE}"arguments":`, `${SPACE}{"city":`, `${SPACE}"Paris"`, '}}', '</tool_call>',
        '<0x0A>',
        '<tool_call>', `{"name":${SPACE}"get_time",${SPACE}"arguments":`, `${SPACE}{"tz":`, `${SPACE}"CET"`, '}}', '</tool_call>',
        `${SPACE}Done.`,
      ],
    },
    { name: 'turn2', prompt: { text: TURN2_PROMPT }, continuation: sp('The| weather| in| Paris| is| sunny| and| 18°C.') },
  ],
  flags: [
    { flag: '<tool_response>', trigger: '<0x0A>', without: '<tool_call>', with: 'The' },
    { flag: `${SPACE}"Paris"`, trigger: '<tool_call>', without: '{"name":', with: `{"name":${SPACE}"get_time",${SPACE}"arguments":` },
    { flag: `${SPACE}"CET"`, trigger: '</tool_call>', without: '<0x0A>', with: `${SPACE}Done.` },
  ],
  extraWords: ['user', 'assistant', 'system', 'What', ...sp(' is| the| weather| in| Paris?')],
  chatTemplate: CHATML_TOOLS_TEMPLATE,
  // one attention head per flag rule
  nEmbd: 192,
};

function sameSize(path: string, size: number): boolean {
  try {
    return statSync(path).size === size && Buffer.compare(readFileSync(path), Buffer.alloc(0)) !== 0;
  } catch {
    return false;
  }
}

export interface ChatModels {
  /** The `demo` fixture (ChatML template, one get_weather call, then a text answer). */
  demo: string;
  /** Two calls in one turn (see PARALLEL_SPEC). */
  parallel: string;
}

/** Writes (if missing or changed) the chat fixtures into the ignored fixtures folder. */
export async function ensureChatModels(): Promise<ChatModels> {
  mkdirSync(fixturesDir, { recursive: true });
  const { demo } = await ensureTestModels(fixturesDir, ['demo']);
  const parallel = join(fixturesDir, 'parallel-calls.gguf');
  const bytes = encodeGguf(buildScriptedModel(PARALLEL_SPEC).gguf);
  let same = false;
  if (sameSize(parallel, bytes.length)) same = Buffer.compare(readFileSync(parallel), bytes) === 0;
  if (!same) await writeBytesAtomic(parallel, bytes);
  return { demo: demo.path, parallel };
}

export const QUESTION = 'What is the weather in Paris?';
export const ANSWER = 'The weather in Paris is sunny and 18°C.';
export const WEATHER_RESULT = '{"temperature": 18}';

/** Turn 2 of the demo conversation (OpenAI shape): the question, the model's call, its result. */
export function weatherTurn2(call: { id: string; type: 'function'; function: { name: string; arguments: string } }) {
  return [
    { role: 'user' as const, content: QUESTION },
    { role: 'assistant' as const, content: null, tool_calls: [call] },
    { role: 'tool' as const, tool_call_id: call.id, content: WEATHER_RESULT },
  ];
}

/** The get_weather tool in the OpenAI `tools` shape. */
export const OPENAI_TOOLS = [
  {
    type: 'function' as const,
    function: {
      name: 'get_weather',
      description: 'Current weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];

/** The get_weather tool in the Anthropic `tools` shape. */
export const ANTHROPIC_TOOLS = [
  {
    name: 'get_weather',
    description: 'Current weather for a city',
    input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
  },
];
