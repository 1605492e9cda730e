// The provider-neutral core of the chat endpoints: conversation ids, prompt building with exact
// replay, generation, tool-call ids and the store.
import { randomBytes } from 'node:crypto';
import { buildChatPrompt, markerTexts, type ChatPrompt, type MarkerTexts, type ReplaySpan } from '../chat/prompt.js';
import type { ChatTemplate } from '../chat/template.js';
import { argumentsObject, canonicalJson, newToolCallId, parseToolCallSpan } from '../chat/tool-calls.js';
import type { ChatMessage, ChatToolCall, ChatToolDefinition } from '../chat/types.js';
import type { Context } from '../context.js';
import type { FinishReason } from '../events.js';
import type { Model } from '../model.js';
import type { GenerateOptions } from '../options.js';
import { HttpError } from './http.js';
import type { ServerMetrics } from './metrics.js';
import type { ToolCallStore } from './store.js';

export type ToolChoice = 'auto' | 'none' | 'required' | { name: string };

/** A chat request after the endpoint converted it. */
export interface ChatRequest {
  messages: ChatMessage[];
  tools: ChatToolDefinition[];
  toolChoice: ToolChoice;
  parallelToolCalls: boolean;
  /** Sampling and limits (temperature, topP, maxTokens, stop, ...). */
  generate: Omit<GenerateOptions, 'prompt' | 'signal' | 'tokens' | 'toolCalls' | 'sessionId' | 'waitForSession' | 'parentKey'>;
  /** The client's `x-llamux-conversation` header, when valid. */
  conversationHeader?: string;
  /** Prefix of minted tool-call ids ('call_' or 'toolu_'). */
  idPrefix: string;
}

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens whose KV was reused (cached). */
  cachedTokens: number;
}

export interface ServiceToolCall {
  /** Position among the calls of this response. */
  index: number;
  id: string;
  name: string;
  arguments: Record<string, unknown>;
  /** Arguments as compact JSON (what OpenAI clients receive). */
  argumentsJson: string;
}

export type ServiceEvent =
  | { type: 'text'; text: string }
  | { type: 'toolCall'; call: ServiceToolCall }
  | { type: 'final'; reason: FinishReason | 'tool_calls'; stop?: string; usage: Usage };

export interface Prepared {
  conversationId: string;
  prompt: ChatPrompt;
}

const CONVERSATION_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** Validates an `x-llamux-conversation` header value. */
export function conversationHeader(value: string | string[] | undefined): string | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined || v === '') return undefined;
  if (!CONVERSATION_RE.test(v)) {
    throw new HttpError(400, 'invalid_request', 'The x-llamux-conversation header must be 1 to 128 characters of A-Z, a-z, 0-9, ".", "_", ":" or "-"');
  }
  return v;
}

export interface ChatServiceOptions {
  model: Model;
  context: Context;
  template: ChatTemplate;
  store: ToolCallStore;
  metrics: ServerMetrics;
}

export class ChatService {
  readonly model: Model;
  readonly context: Context;
  readonly template: ChatTemplate;
  readonly store: ToolCallStore;
  readonly metrics: ServerMetrics;
  readonly markers: MarkerTexts | undefined;
  readonly fingerprint: string;

  constructor(o: ChatServiceOptions) {
    this.model = o.model;
    this.context = o.context;
    this.template = o.template;
    this.store = o.store;
    this.metrics = o.metrics;
    this.markers = markerTexts(o.context);
    this.fingerprint = o.model.metadata.fingerprint;
  }

  /**
   * The conversation a request belongs to: the one its known tool calls were generated in, else
   * the client's header, else a new random id. Never derived from a hash of the content.
   */
  resolveConversation(messages: readonly ChatMessage[], header: string | undefined): string {
    for (let i = messages.length - 1; i >= 0; i--) {
      const m = messages[i]!;
      if (m.role !== 'assistant' || !m.toolCalls) continue;
      for (let j = m.toolCalls.length - 1; j >= 0; j--) {
        const s = this.store.get(m.toolCalls[j]!.id);
        if (s && s.model === this.fingerprint) return s.conversation;
      }
    }
    return header ?? `conv_${Date.now().toString(36)}${randomBytes(8).toString('hex')}`;
  }

  /** The stored span of a historical call, when its id is known and its name and arguments are unchanged. */
  #replay(call: ChatToolCall): ReplaySpan | undefined {
    const s = this.store.get(call.id);
    if (!s || s.model !== this.fingerprint || s.callsInSpan !== 1 || s.arguments === '') return undefined;
    if (s.name !== call.name) return undefined;
    const args = argumentsObject(call.arguments);
    if (!args || canonicalJson(args) !== s.arguments) return undefined;
    const out: ReplaySpan = { text: s.spanText, tokens: s.spanTokens };
    if (s.preludeText !== undefined && s.preludeTokens) out.prelude = { text: s.preludeText, tokens: s.preludeTokens };
    return out;
  }

  /** Renders and tokenizes the request. @throws HttpError 400 (template refused it, or it does not fit the context) */
  prepare(req: ChatRequest): Prepared {
    const limit = this.context.settings.sequenceContextSize;
    // Cheap lower bounds first, so an oversized conversation is refused before it is rendered
    // and tokenized on the event loop: every message renders at least one token, and no
    // token carries more than a few hundred bytes of text.
    let contentBytes = 0;
    for (const m of req.messages) contentBytes += typeof m.content === 'string' ? m.content.length : JSON.stringify(m.content ?? '').length;
    const atLeast = Math.max(req.messages.length, Math.floor(contentBytes / 256));
    if (atLeast >= limit) {
      throw new HttpError(400, 'context_length', `The conversation needs at least ${atLeast} tokens but a sequence of this server's context holds ${limit}; shorten the conversation or start the server with a larger --ctx`);
    }
    const conversationId = this.resolveConversation(req.messages, req.conversationHeader);
    const prompt = buildChatPrompt(this.model, req.messages, {
      template: this.template,
      tools: req.tools,
      ...(this.markers ? { markers: this.markers } : {}),
      replay: (call) => this.#replay(call),
    });
    if (prompt.replayed.length) this.metrics.replay.inc({ outcome: 'replayed' }, prompt.replayed.length);
    if (prompt.unknown.length) this.metrics.replay.inc({ outcome: 'unknown' }, prompt.unknown.length);
    if (prompt.unlocated.length) this.metrics.replay.inc({ outcome: 'unlocated' }, prompt.unlocated.length);
    if (prompt.tokens.length >= limit) {
      throw new HttpError(400, 'context_length', `The prompt is ${prompt.tokens.length} tokens but a sequence of this server's context holds ${limit}; shorten the conversation or start the server with a larger --ctx`);
    }
    return { conversationId, prompt };
  }

  /** Generates, yielding text, complete tool calls (stored under fresh ids) and a final event. */
  async *run(p: Prepared, req: ChatRequest, signal: AbortSignal): AsyncGenerator<ServiceEvent, void, undefined> {
    const detect = req.toolChoice !== 'none' && this.markers !== undefined;
    this.metrics.inFlight++;
    try {
      const gen = this.context.generate({
        ...req.generate,
        prompt: p.prompt.tokens,
        tokens: true,
        toolCalls: detect,
        signal,
        // The conversation's sequence stays pinned to it: a prompt extending the last one
        // prefills only the new tokens. Requests of one conversation run one at a time.
        sessionId: p.conversationId,
        waitForSession: true,
      });
      let prelude = { text: [] as string[], tokens: [] as number[] };
      const preludes = new Map<number, { text: string; tokens: number[] }>();
      let emitted = 0;
      for await (const ev of gen) {
        switch (ev.type) {
          case 'text':
            prelude.text.push(ev.text);
            if (ev.tokens) for (const t of ev.tokens) prelude.tokens.push(t);
            if (ev.text.length > 0) yield { type: 'text', text: ev.text };
            break;
          case 'toolCallStart':
            preludes.set(ev.index, { text: prelude.text.join(''), tokens: prelude.tokens });
            prelude = { text: [], tokens: [] };
            break;
          case 'toolCallEnd': {
            const parsed = parseToolCallSpan(ev.text);
            if (parsed.some((c) => c.invalidArguments !== undefined || c.name === '')) {
              // Not a call a client could run: hand the model's raw bytes back as text.
              const raw = `${this.markers?.start ?? ''}${ev.text}${this.markers?.end ?? ''}`;
              yield { type: 'text', text: raw };
              break;
            }
            if (!req.parallelToolCalls && emitted > 0) break;
            const pre = preludes.get(ev.index);
            for (const c of req.parallelToolCalls ? parsed : parsed.slice(0, 1)) {
              const id = newToolCallId(req.idPrefix);
              const args = canonicalJson(c.arguments);
              this.store.put({
                id,
                model: this.fingerprint,
                conversation: p.conversationId,
                name: c.name,
                arguments: args,
                spanText: ev.text,
                spanTokens: ev.tokens,
                ...(pre && pre.text.length > 0 ? { preludeText: pre.text, preludeTokens: Int32Array.from(pre.tokens) } : {}),
                callsInSpan: parsed.length,
                createdAt: Date.now(),
              });
              this.metrics.toolCalls.inc();
              yield { type: 'toolCall', call: { index: emitted++, id, name: c.name, arguments: c.arguments, argumentsJson: JSON.stringify(c.arguments) } };
            }
            break;
          }
          case 'final': {
            this.metrics.recordGeneration({
              promptTokens: ev.promptTokens,
              reusedTokens: ev.reusedTokens,
              prefilledTokens: ev.prefilledTokens,
              generatedTokens: ev.generatedTokens,
              ttftMs: ev.timings.ttftMs,
              cacheOutcome: ev.cache.outcome,
              ...(ev.cache.tier ? { cacheTier: ev.cache.tier } : {}),
            });
            const usage: Usage = { promptTokens: ev.promptTokens, completionTokens: ev.generatedTokens, cachedTokens: ev.reusedTokens };
            const reason = emitted > 0 && ev.finishReason !== 'length' ? 'tool_calls' : ev.finishReason;
            yield ev.stop !== undefined ? { type: 'final', reason, stop: ev.stop, usage } : { type: 'final', reason, usage };
            break;
          }
          default:
            break;
        }
      }
    } finally {
      this.metrics.inFlight--;
    }
  }
}
