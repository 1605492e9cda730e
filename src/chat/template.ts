// Jinja chat templates (tokenizer.chat_template) rendered in TypeScript with
// @huggingface/jinja: llama.cpp's own llama_chat_apply_template knows no Jinja and no tools.
import { createHash } from 'node:crypto';
import { Template } from '@huggingface/jinja';
import { LlamuxError } from '../errors.js';
import type { Model } from '../model/model.js';
import { parseOptions } from '../options.js';
import { z } from 'zod';
import {
  ChatMessagesSchema,
  ChatToolDefinitionSchema,
  type ChatMessage,
  type ChatToolCall,
  type ChatToolDefinition,
} from './types.js';
import { parseJsonBounded } from '../json-limits.js';

/** Renders the memo keeps (an agent's conversation: one per assistant turn of the last request). */
const RENDER_MEMO_ENTRIES = 128;

/**
 * The template used when a model has none: ChatML with Hermes-style tool calls
 * (`<tool_call>{"name": …, "arguments": …}</tool_call>`), as Qwen 2.5 writes them.
 */
export const DEFAULT_CHAT_TEMPLATE = [
  '{%- if tools %}',
  "{{- '<|im_start|>system\\n' }}",
  "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}",
  "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}",
  "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}",
  "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}",
  "{%- elif messages[0].role == 'system' %}",
  "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}",
  '{%- endif %}',
  '{%- for message in messages %}',
  "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}",
  "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}",
  "{%- elif message.role == 'assistant' %}",
  "{{- '<|im_start|>assistant\\n' + message.content }}",
  '{%- if message.tool_calls %}{%- for tool_call in message.tool_calls %}',
  "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}",
  "{{- '<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' + (tool_call.arguments | tojson) + '}\\n</tool_call>' }}",
  '{%- endfor %}{%- endif %}',
  "{{- '<|im_end|>\\n' }}",
  "{%- elif message.role == 'tool' %}",
  "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}",
  '{%- endif %}',
  '{%- endfor %}',
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
].join('\n');

export interface ChatTemplateOptions {
  /** Value of the `bos_token` template variable (default ''). */
  bosToken?: string;
  /** Value of the `eos_token` template variable (default ''). */
  eosToken?: string;
}

const ChatTemplateOptionsSchema = z.object({ bosToken: z.string().optional(), eosToken: z.string().optional() }).strict();

export interface RenderChatOptions {
  /** Tools offered to the model, rendered through the template's `tools` variable. */
  tools?: readonly ChatToolDefinition[];
  /** Append the assistant header the model continues from (default true). */
  addGenerationPrompt?: boolean;
  /** Extra template variables (e.g. `{ enable_thinking: false }`); they cannot replace `messages`, `tools` or the special tokens. */
  variables?: Record<string, unknown>;
}

export const RenderChatOptionsSchema = z
  .object({
    tools: z.array(ChatToolDefinitionSchema).optional(),
    addGenerationPrompt: z.boolean().default(true),
    variables: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();

const RESERVED_VARIABLES = new Set(['messages', 'tools', 'add_generation_prompt', 'bos_token', 'eos_token']);

/** A template message: the OpenAI-style shape most chat templates read. */
type TemplateMessage = Record<string, unknown>;

const compiled = new Map<string, Template>();

function compile(source: string): Template {
  let t = compiled.get(source);
  if (t) {
    compiled.delete(source);
    compiled.set(source, t);
    return t;
  }
  t = new Template(source);
  compiled.set(source, t);
  if (compiled.size > 32) compiled.delete(compiled.keys().next().value as string);
  return t;
}

const ALNUM = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

/** A stable 9-character alphanumeric stand-in for an id (Mistral templates refuse anything else). */
export function alnum9(id: string): string {
  if (/^[A-Za-z0-9]{9}$/.test(id)) return id;
  const h = createHash('sha256').update(id).digest();
  let out = '';
  for (let i = 0; i < 9; i++) out += ALNUM[h[i]! % ALNUM.length];
  return out;
}

function decodeArguments(args: Record<string, unknown> | string): unknown {
  if (typeof args !== 'string') return args;
  try {
    const v: unknown = parseJsonBounded(args);
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v;
  } catch {
    // not JSON: the template gets the text as the client sent it
  }
  return args;
}

/**
 * A compiled chat template. Renders a conversation, tools, assistant tool calls, tool results and
 * the generation prompt into the prompt text the model was trained on.
 *
 * @example
 * const tpl = ChatTemplate.fromModel(model);
 * const text = tpl.render([{ role: 'user', content: 'Hi' }], { tools: [{ name: 'get_weather' }] });
 */
export class ChatTemplate {
  readonly source: string;
  readonly bosToken: string;
  readonly eosToken: string;
  /** 'alnum9' when the template only accepts 9-character alphanumeric tool-call ids (Mistral). */
  readonly toolCallIdStyle: 'any' | 'alnum9';
  #template: Template;
  readonly #memo = new Map<string, string>();
  #pure = true;

  /** @throws LlamuxError INVALID_ARGUMENT when the source is not a template @huggingface/jinja can parse. */
  constructor(source: string, options?: ChatTemplateOptions) {
    if (typeof source !== 'string' || source.length === 0) {
      throw new LlamuxError('INVALID_ARGUMENT', `Expected the chat template to be a non-empty string but received ${typeof source === 'string' ? 'an empty string' : typeof source}`);
    }
    const o = parseOptions(ChatTemplateOptionsSchema, options, 'chat template options');
    try {
      this.#template = compile(source);
    } catch (e) {
      throw new LlamuxError('INVALID_ARGUMENT', `The chat template is not valid Jinja: ${(e as Error).message}`, { cause: e });
    }
    this.source = source;
    this.bosToken = o.bosToken ?? '';
    this.eosToken = o.eosToken ?? '';
    this.toolCallIdStyle = /\|\s*length\s*!=\s*9/.test(source) ? 'alnum9' : 'any';
    this.#pure = !/strftime_now|\bnow\s*\(|\brandom\b/.test(source);
  }

  /**
   * The model's own template (`tokenizer.chat_template`), an override, or
   * {@link DEFAULT_CHAT_TEMPLATE} when the model has none; `bos_token`/`eos_token` come from the
   * model's vocabulary.
   */
  static fromModel(model: Model, override?: string): ChatTemplate {
    const source = override ?? model.metadata.chatTemplate ?? DEFAULT_CHAT_TEMPLATE;
    const v = model.vocab;
    const text = (id: number): string => (id >= 0 && id < v.size ? model.tokenInfo(id).text : '');
    return new ChatTemplate(source, { bosToken: text(v.bos), eosToken: text(v.eos) });
  }

  /**
   * Renders a conversation.
   * @throws LlamuxError INVALID_ARGUMENT (bad messages or options, or the template refuses the
   *   conversation, e.g. roles that do not alternate)
   */
  render(messages: readonly ChatMessage[], options?: RenderChatOptions): string {
    const msgs = parseOptions(ChatMessagesSchema, messages, 'chat messages') as ChatMessage[];
    const o = parseOptions(RenderChatOptionsSchema, options, 'render options');
    return this.renderUnchecked(msgs, o.tools, o.addGenerationPrompt, o.variables);
  }

  /** @internal render() without validation (callers validated already). */
  renderUnchecked(
    messages: readonly ChatMessage[],
    tools: readonly ChatToolDefinition[] | undefined,
    addGenerationPrompt: boolean,
    variables?: Record<string, unknown>,
  ): string {
    const vars: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(variables ?? {})) if (!RESERVED_VARIABLES.has(k)) vars[k] = v;
    vars.bos_token = this.bosToken;
    vars.eos_token = this.eosToken;
    vars.add_generation_prompt = addGenerationPrompt;
    if (tools && tools.length > 0) {
      vars.tools = tools.map((t) => ({
        type: 'function',
        function: {
          name: t.name,
          description: t.description ?? '',
          parameters: t.parameters ?? { type: 'object', properties: {} },
        },
      }));
    }
    const converted = this.#toTemplateMessages(messages);
    // Prompt building renders one prefix of the conversation per replayed assistant turn, and an
    // agent sends the same conversation again each turn, one turn longer: the earlier renders
    // are served from a small memo (the template is a pure function of these inputs, unless it
    // reads the clock).
    const key = this.#pure ? createHash('sha1').update(JSON.stringify([vars, converted])).digest('base64') : undefined;
    const hit = key === undefined ? undefined : this.#memo.get(key);
    if (hit !== undefined) {
      this.#memo.delete(key!);
      this.#memo.set(key!, hit);
      return hit;
    }
    const text = this.#renderConverted(vars, converted);
    if (key !== undefined) {
      this.#memo.set(key, text);
      if (this.#memo.size > RENDER_MEMO_ENTRIES) this.#memo.delete(this.#memo.keys().next().value!);
    }
    return text;
  }

  #renderConverted(vars: Record<string, unknown>, converted: TemplateMessage[]): string {
    try {
      return this.#template.render({ ...vars, messages: converted });
    } catch (first) {
      // Templates without a system role (Gemma 2): fold the system text into the first user turn.
      const folded = foldSystem(converted);
      if (folded) {
        try {
          return this.#template.render({ ...vars, messages: folded });
        } catch {
          // report the original error
        }
      }
      throw new LlamuxError('INVALID_ARGUMENT', `The chat template cannot render this conversation: ${(first as Error).message}`, { cause: first });
    }
  }

  #toTemplateMessages(messages: readonly ChatMessage[]): TemplateMessage[] {
    const mapId = this.toolCallIdStyle === 'alnum9' ? alnum9 : (id: string) => id;
    const names = new Map<string, string>();
    const out: TemplateMessage[] = [];
    for (const m of messages) {
      switch (m.role) {
        case 'system':
          out.push({ role: m.role, content: m.content });
          break;
        case 'user':
          if (typeof m.content !== 'string' && m.content.some((p) => p.type !== 'text')) {
            throw new LlamuxError('INVALID_ARGUMENT', 'A user message holds media parts: build its prompt with buildChatPromptWithMedia (a model loaded with a projector)');
          }
          out.push({ role: m.role, content: typeof m.content === 'string' ? m.content : m.content.map((p) => (p.type === 'text' ? p.text : '')).join('') });
          break;
        case 'assistant': {
          const msg: TemplateMessage = { role: 'assistant', content: m.content ?? '' };
          if (m.reasoningContent !== undefined) msg.reasoning_content = m.reasoningContent;
          if (m.toolCalls && m.toolCalls.length > 0) {
            msg.tool_calls = m.toolCalls.map((c: ChatToolCall) => {
              names.set(c.id, c.name);
              return { id: mapId(c.id), type: 'function', function: { name: c.name, arguments: decodeArguments(c.arguments) } };
            });
          }
          out.push(msg);
          break;
        }
        case 'tool': {
          const name = m.name ?? names.get(m.toolCallId) ?? '';
          out.push({ role: 'tool', tool_call_id: mapId(m.toolCallId), name, content: m.content });
          break;
        }
      }
    }
    return out;
  }
}

function foldSystem(messages: TemplateMessage[]): TemplateMessage[] | undefined {
  if (messages[0]?.role !== 'system') return undefined;
  const system = String(messages[0].content ?? '');
  const rest = messages.slice(1);
  const firstUser = rest.findIndex((m) => m.role === 'user');
  if (firstUser < 0) return [{ role: 'user', content: system }, ...rest];
  return rest.map((m, i) => (i === firstUser ? { ...m, content: `${system}\n\n${String(m.content ?? '')}` } : m));
}

/**
 * Renders a conversation with the model's chat template (or `template`, a Jinja source).
 * @example
 * const text = renderChat(model, [{ role: 'user', content: 'Weather in Paris?' }], { tools });
 */
export function renderChat(
  model: Model,
  messages: readonly ChatMessage[],
  options?: RenderChatOptions & { template?: string },
): string {
  const { template, ...rest } = options ?? {};
  return ChatTemplate.fromModel(model, template).render(messages, rest);
}
