import { describe, expect, it } from 'vitest';
import { ChatTemplate, DEFAULT_CHAT_TEMPLATE, alnum9, type ChatMessage, type ChatToolDefinition } from '../../src/chat/index.js';
import { LlamuxError } from '../../src/errors.js';
import { readTemplate } from '../server/fixtures.js';

const tools: ChatToolDefinition[] = [
  {
    name: 'get_weather',
    description: 'Current weather',
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'City name' } }, required: ['city'] },
  },
];

/** system, user, an assistant tool call (arguments as the JSON text OpenAI clients send), its result. */
const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are helpful.' },
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: null, toolCalls: [{ id: 'call_abc123', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
  { role: 'tool', toolCallId: 'call_abc123', content: '{"temperature": 18}' },
];

function inOrder(text: string, parts: string[]): void {
  let at = -1;
  for (const p of parts) {
    const next = text.indexOf(p, at + 1);
    expect(next, `"${p}" after position ${at}`).toBeGreaterThan(at);
    at = next;
  }
}

function render(name: string, messages = conversation, opts: { bos?: string; eos?: string; tools?: ChatToolDefinition[] } = {}): string {
  const t = new ChatTemplate(readTemplate(name), { bosToken: opts.bos ?? '<s>', eosToken: opts.eos ?? '</s>' });
  return t.render(messages, { tools: opts.tools ?? tools });
}

describe('ChatTemplate#render() with real chat templates', () => {
  for (const name of ['Qwen-Qwen2.5-7B-Instruct', 'Qwen-Qwen3-0.6B']) {
    it(`${name}: tools in the system turn, the call inside <tool_call>, the result in <tool_response>, the generation prompt last`, () => {
      const text = render(name);
      expect(text).toContain('<tools>\n{"type": "function", "function": {"name": "get_weather", "description": "Current weather"');
      // Arguments sent as JSON text reach the template as an object (tojson, Python spacing).
      expect(text).toContain('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>');
      expect(text).toContain('<tool_response>\n{"temperature": 18}\n</tool_response>');
      inOrder(text, ['<|im_start|>system\nYou are helpful.', '<|im_start|>user\nWeather in Paris?', '<|im_start|>assistant\n<tool_call>', '<|im_start|>user\n<tool_response>']);
      expect(text.endsWith('<|im_start|>assistant\n')).toBe(true);
    });
  }

  it('Hermes 3: tool signatures, the call in <tool_call>, the result in a tool turn', () => {
    const text = render('NousResearch-Hermes-3-Llama-3.1-8B-tool_use');
    expect(text.startsWith('<s><|im_start|>system\n')).toBe(true);
    expect(text).toContain('get_weather(city: str) - Current weather');
    inOrder(text, [
      '<|im_start|>user\nWeather in Paris?<|im_end|>',
      '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
      '<|im_start|>tool\n<tool_response>\n{"temperature": 18}\n</tool_response><|im_end|>',
    ]);
    expect(text.endsWith('<|im_start|>assistant\n')).toBe(true);
  });

  for (const name of ['meta-llama-Llama-3.1-8B-Instruct', 'meta-llama-Llama-3.3-70B-Instruct']) {
    it(`${name}: bos first, the call as JSON with "parameters", the result in an ipython turn`, () => {
      const text = render(name, conversation, { bos: '<|begin_of_text|>' });
      expect(text.startsWith('<|begin_of_text|><|start_header_id|>system<|end_header_id|>')).toBe(true);
      inOrder(text, [
        'You are helpful.<|eot_id|>',
        '<|start_header_id|>user<|end_header_id|>',
        'Weather in Paris?<|eot_id|>',
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
        '<|start_header_id|>ipython<|end_header_id|>',
      ]);
      expect(text.endsWith('<|start_header_id|>assistant<|end_header_id|>\n\n')).toBe(true);
    });
  }

  it('Mistral Nemo: tool-call ids become stable 9-character ids, the same in the call and its result', () => {
    const t = new ChatTemplate(readTemplate('mistralai-Mistral-Nemo-Instruct-2407'), { bosToken: '<s>', eosToken: '</s>' });
    expect(t.toolCallIdStyle).toBe('alnum9');
    const text = t.render(conversation, { tools });
    const id = alnum9('call_abc123');
    expect(id).toMatch(/^[A-Za-z0-9]{9}$/);
    expect(alnum9('call_abc123')).toBe(id);
    expect(alnum9('call_abc124')).not.toBe(id);
    inOrder(text, [
      '<s>',
      '[AVAILABLE_TOOLS]',
      '[INST]',
      'Weather in Paris?[/INST]',
      `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "${id}"}]</s>`,
      `[TOOL_RESULTS]{"content": {"temperature": 18}, "call_id": "${id}"}[/TOOL_RESULTS]`,
    ]);
  });

  it('Gemma 2 (no system role): folds the system text into the first user turn', () => {
    const t = new ChatTemplate(readTemplate('google-gemma-2-2b-it'), { bosToken: '<bos>', eosToken: '<eos>' });
    const text = t.render([
      { role: 'system', content: 'You are helpful.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello!' },
      { role: 'user', content: 'Bye' },
    ]);
    expect(text).toBe(
      '<bos><start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n',
    );
  });

  it('Gemma 4: declarations, the call and the response in its own syntax', () => {
    const text = render('google-gemma-4-31B-it', conversation, { bos: '<bos>' });
    inOrder(text, ['<|turn>system\nYou are helpful.', '<|tool>declaration:get_weather', '<|turn>user\nWeather in Paris?', '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>', '<|tool_response>response:get_weather']);
  });

  it('addGenerationPrompt false leaves the assistant header out', () => {
    const t = new ChatTemplate(readTemplate('Qwen-Qwen2.5-7B-Instruct'));
    const text = t.render([{ role: 'user', content: 'Hi' }], { addGenerationPrompt: false });
    expect(text.endsWith('<|im_start|>user\nHi<|im_end|>\n')).toBe(true);
  });

  it('passes extra variables to the template (Qwen3 enable_thinking) but never lets them replace messages', () => {
    const t = new ChatTemplate(readTemplate('Qwen-Qwen3-0.6B'));
    const text = t.render([{ role: 'user', content: 'Hi' }], { variables: { enable_thinking: false, messages: [] } });
    expect(text).toContain('<|im_start|>user\nHi<|im_end|>');
    expect(text.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
  });

  it('renders the default ChatML template with tool calls and results', () => {
    const t = new ChatTemplate(DEFAULT_CHAT_TEMPLATE);
    const text = t.render(conversation, { tools });
    inOrder(text, [
      '<|im_start|>system\nYou are helpful.\n\n# Tools',
      '<|im_start|>user\nWeather in Paris?<|im_end|>',
      '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
      '<|im_start|>user\n<tool_response>\n{"temperature": 18}\n</tool_response><|im_end|>',
    ]);
    expect(text.endsWith('<|im_start|>assistant\n')).toBe(true);
  });

  it('keeps arguments that are not JSON as the text the client sent', () => {
    const t = new ChatTemplate(readTemplate('Qwen-Qwen3-0.6B'));
    const text = t.render([
      { role: 'user', content: 'x' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'a', name: 'f', arguments: '{not json' }] },
    ], { addGenerationPrompt: false });
    expect(text).toContain('{"name": "f", "arguments": {not json}');
  });
});

describe('ChatTemplate guards', () => {
  it('rejects a template that does not parse with INVALID_ARGUMENT', () => {
    expect(() => new ChatTemplate('{% if %}')).toThrow(LlamuxError);
    try {
      new ChatTemplate('{% for x in %}');
    } catch (e) {
      expect((e as LlamuxError).code).toBe('INVALID_ARGUMENT');
      expect((e as LlamuxError).message).toMatch(/^The chat template is not valid Jinja: /);
    }
  });

  it('rejects an empty template and unknown options', () => {
    expect(() => new ChatTemplate('')).toThrow(/non-empty string but received an empty string/);
    expect(() => new ChatTemplate('x', { bos: '<s>' } as never)).toThrow(/unknown option "bos"/);
  });

  it('names the bad message field', () => {
    const t = new ChatTemplate(DEFAULT_CHAT_TEMPLATE);
    expect(() => t.render([{ role: 'user', content: 3 } as never])).toThrow(/for "0.content" but received 3 of type number/);
    expect(() => t.render([{ role: 'robot', content: 'x' } as never])).toThrow(LlamuxError);
    expect(() => t.render([{ role: 'tool', content: 'x' } as never])).toThrow(/"0.toolCallId"/);
  });

  it('turns raise_exception into INVALID_ARGUMENT with the template message', () => {
    const t = new ChatTemplate(readTemplate('google-gemma-2-2b-it'));
    try {
      t.render([{ role: 'assistant', content: 'first' }]);
      expect.unreachable();
    } catch (e) {
      expect((e as LlamuxError).code).toBe('INVALID_ARGUMENT');
      expect((e as LlamuxError).message).toBe('The chat template cannot render this conversation: Conversation roles must alternate user/assistant/user/assistant/...');
    }
  });
});
