// Fixtures of the Responses API tests: the function tool in the Responses shape, and a Qwen3.5
// model whose greedy turns are written exactly as its template renders them back, so a chain of
// responses can reuse every token it generated.
import { ChatTemplate } from '../../src/chat/index.js';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildScriptedModel, encodeGguf, writeBytesAtomic, type ScriptedModelSpec } from '../../src/gguf/index.js';
import { fixturesDir } from '../helpers/paths.js';
import { qwenThinkSpec, WEATHER_QUESTION, XML_TOOLS } from '../formats/fixtures.js';
import { readTemplate } from './fixtures.js';

/** get_weather(city) in the Responses `tools` shape. */
export const RESPONSE_TOOLS = [
  {
    type: 'function' as const,
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    strict: false,
  },
];

/** get_weather(city, days) of the Qwen3.5 model, in the Responses `tools` shape. */
export const XML_RESPONSE_TOOLS = XML_TOOLS.map((t) => ({ type: 'function' as const, ...t, strict: false }));

export const THINK_1 = 'Need the forecast.\n';
export const THINK_2 = 'Need nothing.\n';
export const ANSWER_2 = 'It is 18.';
export const TOOL_OUTPUT = '{"temp": 18}';
const SPAN = ['\n<function=get_weather>\n', '<parameter=city>\n', 'Paris', '\n</parameter>\n<parameter=days>\n', '3', '\n</parameter>\n</function>\n'];

/**
 * `qwen35-responses`: the Qwen3.5 template with tools. Turn 1 reasons "Need the forecast.",
 * closes `</think>`, writes the template's blank line and calls get_weather {city: Paris, days: 3};
 * once a `<tool_response>` is in the context it reasons "Need nothing." and answers "It is 18.".
 */
export function qwenResponsesSpec(): ScriptedModelSpec {
  const template = readTemplate('Qwen3.5-4B');
  const chat = new ChatTemplate(template, { bosToken: '', eosToken: '<|im_end|>' });
  const prompt = chat.render([{ role: 'user', content: WEATHER_QUESTION }], { tools: XML_TOOLS });
  const prompt2 = chat.render(
    [
      { role: 'user', content: WEATHER_QUESTION },
      { role: 'assistant', content: null, reasoningContent: THINK_1, toolCalls: [{ id: 'c1', name: 'get_weather', arguments: { city: 'Paris', days: 3 } }] },
      { role: 'tool', toolCallId: 'c1', content: TOOL_OUTPUT },
    ],
    { tools: XML_TOOLS },
  );
  return {
    ...qwenThinkSpec(),
    name: 'qwen35-responses',
    scripts: [
      { name: 'think-call', prompt: { text: prompt }, continuation: ['Need', '▁the', '▁forecast.\n', '</think>', '\n\n', '<tool_call>', ...SPAN, '</tool_call>'] },
      { name: 'think-answer', prompt: { text: prompt2 }, continuation: ['Need', '▁nothing.\n', '</think>', '\n\n', 'It', '▁is', '▁18.'] },
    ],
    flags: [
      // the first reasoning word and the blank line after `</think>` (one flag token per rule)
      { flag: '</tool_response>', trigger: 'Need', without: '▁the', with: '▁nothing.\n' },
      { flag: '<tool_response>', trigger: '\n\n', without: '<tool_call>', with: 'It' },
    ],
    extraWords: ['user', 'assistant', 'system'],
    chatTemplate: template,
    nEmbd: 192,
  };
}

/** Writes the model (if missing or changed); its path and the greedy token counts of its two turns. */
export async function ensureResponsesModel(): Promise<{ path: string; generated: { call: number; answer: number } }> {
  const spec = qwenResponsesSpec();
  const built = buildScriptedModel(spec);
  mkdirSync(fixturesDir, { recursive: true });
  const path = join(fixturesDir, `${spec.name}.gguf`);
  const bytes = encodeGguf(built.gguf);
  if (!existsSync(path) || Buffer.compare(readFileSync(path), bytes) !== 0) await writeBytesAtomic(path, bytes);
  const scripts = built.description.scripts;
  return { path, generated: { call: scripts['think-call']!.greedy.length, answer: scripts['think-answer']!.greedy.length } };
}
