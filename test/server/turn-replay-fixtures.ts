// Fixtures of the whole-turn replay tests (turn-replay*.test.ts) on the zoo qwen35 model (the
// real Qwen3.5 vocabulary and template, hybrid memory, random weights): a server, a second one
// that never sees the conversations, and expected counts computed from the template and the
// tokenizer only.
import { join } from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { ChatTemplate, loadModel, type ChatMessage, type ChatToolDefinition, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { tempDir } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

export type Json = Record<string, any>;

export const SYSTEM = 'You are a coding agent. Think briefly, then call one tool.';
const USER = 'Read the file with the failing test.';
/** A user request of its own per test: no test's conversation shares KV with another's. */
export const userFor = (what: string): string => `${USER} (${what})`;
export const TOOLS: ChatToolDefinition[] = [
  { name: 'Read', description: 'Read a file.', parameters: { type: 'object', properties: { path: { type: 'string', description: 'The absolute path.', enum: ['/a.ts', '/b.ts'] } }, required: ['path'] } },
];
export const CHAT_TOOLS = TOOLS.map((t) => ({ type: 'function', function: t }));
/** Reasoning tokens before the forced `</think>`. */
export const BUDGET = 6;
export const result = (k: number): string => JSON.stringify({ status: 'ok', step: k, output: 'the test lists each case and its status' });

export interface Measured {
  prompt: number;
  cached: number;
  generated: number;
}

export class Harness {
  model!: Model;
  template!: ChatTemplate;
  server!: LlamuxServer;
  /**
   * A second server, in isolation mode (API key `k`, tenants by `x-llamux-tenant`): the tenant
   * `cold` never sees these conversations' KV.
   */
  cold!: LlamuxServer;
  #conversation = '';

  /** Registers the model and servers for the file's tests. */
  static setup(options: { cold?: boolean } = {}): Harness {
    const h = new Harness();
    beforeAll(async () => {
      const zoo = await zooModels(['qwen35']);
      h.model = await loadModel(zoo.qwen35.path);
      h.template = ChatTemplate.fromModel(h.model);
      h.server = await createServer({ model: h.model, port: 0, ctx: 4096, parallel: 2, threads: 1, storePath: join(tempDir('turn-replay'), 'store.sqlite'), log: () => {} });
      if (options.cold) h.cold = await createServer({ model: h.model, port: 0, ctx: 4096, parallel: 2, threads: 1, apiKey: 'k', isolateTenants: true, log: () => {} });
    });
    afterAll(async () => {
      await h.server?.close();
      await h.cold?.close();
      await h.model?.dispose();
    });
    return h;
  }

  async post(path: string, body: Json, headers: Record<string, string> = {}, on: LlamuxServer = this.server): Promise<Json> {
    const r = await fetch(`${on.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const j = (await r.json()) as Json;
    if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(j)}`);
    return j;
  }

  async turnMetric(outcome: string): Promise<number> {
    const text = await (await fetch(`${this.server.url}/metrics`)).text();
    const m = new RegExp(`^llamux_turn_replay_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text);
    return m ? Number(m[1]) : 0;
  }

  tokenize(text: string, first = false): Int32Array {
    return this.model.tokenize(text, { addSpecial: first, parseSpecial: true });
  }

  render(messages: ChatMessage[], variables?: Record<string, unknown>): string {
    return this.template.render(messages, { tools: TOOLS, addGenerationPrompt: true, ...(variables ? { variables } : {}) });
  }

  /** The template's text after the last call of the conversation: its turn's closing, the tool results, the generation prompt. */
  afterLastCallText(messages: ChatMessage[], variables?: Record<string, unknown>): string {
    const text = this.render(messages, variables);
    return text.slice(text.lastIndexOf('</tool_call>') + '</tool_call>'.length);
  }

  afterLastCall(messages: ChatMessage[], variables?: Record<string, unknown>): number {
    return this.tokenize(this.afterLastCallText(messages, variables)).length;
  }

  /** Turn k >= 1: prompt = turn k-1's prompt + its generated tokens + the text after its call; all but the last generated token reused. */
  expectOnlyNewPrefilled(turns: Measured[], after: number[]): void {
    for (let k = 1; k < turns.length; k++) {
      const prev = turns[k - 1]!;
      expect({ k, prompt: turns[k]!.prompt }).toEqual({ k, prompt: prev.prompt + prev.generated + after[k]! });
      expect({ k, cached: turns[k]!.cached }).toEqual({ k, cached: prev.prompt + prev.generated - 1 });
    }
  }

  /** A chat conversation's first messages (a user request of its own). */
  start(what: string): Json[] {
    this.#conversation = what;
    return [{ role: 'system', content: SYSTEM }, { role: 'user', content: userFor(what) }];
  }

  startEquivalent(): ChatMessage[] {
    return [{ role: 'system', content: SYSTEM }, { role: 'user', content: userFor(this.#conversation) }];
  }

  /** A forced call after a reasoning budget, on chat completions (`extra` may turn it into a measuring request: tool_choice none, a token). */
  async chatCall(messages: Json[], headers: Record<string, string> = {}, extra: Json = {}, on: LlamuxServer = this.server): Promise<{ r: Json; message: Json; call: Json }> {
    const r = await this.post('/v1/chat/completions', { model: 'q', messages, tools: CHAT_TOOLS, tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_tokens: 200, reasoning_budget: BUDGET, ...extra }, headers, on);
    const message = r.choices[0].message as Json;
    if (extra.tool_choice === undefined) expect(message.tool_calls).toHaveLength(1);
    return { r, message, call: message.tool_calls?.[0] };
  }

  /** Greedy text of the cold server from these prompt tokens. */
  async coldText(tokens: ArrayLike<number>, maxTokens: number): Promise<string> {
    // every generated token's text (the completion's `text` leaves out a reasoning span the prompt opened)
    const r = await this.post('/v1/completions', { model: 'q', prompt: Array.from(tokens), max_tokens: maxTokens, temperature: 0, logprobs: 1 }, asTenant('cold'), this.cold);
    return (r.choices[0].logprobs.tokens as string[]).join('');
  }
}

export const assistant = (reasoning: string, content: string | null, call: { id: string; name: string; arguments: string }): ChatMessage => ({
  role: 'assistant',
  content,
  ...(reasoning ? { reasoningContent: reasoning } : {}),
  toolCalls: [call],
});

/** The headers of a tenant of the `cold` server. */
export const asTenant = (tenant: string, conversation?: string): Record<string, string> => ({
  authorization: 'Bearer k',
  'x-llamux-tenant': tenant,
  ...(conversation !== undefined ? { 'x-llamux-conversation': conversation } : {}),
});

export const concat = (...parts: ArrayLike<number>[]): number[] => parts.flatMap((p) => Array.from(p));
