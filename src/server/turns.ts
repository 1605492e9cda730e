// Whole assistant turns the server generated: recorded while generating, identified again when a
// client sends them back (src/chat/turn-replay.ts splices their exact tokens into the prompt).
import { createHash } from 'node:crypto';
import { argumentsObject, canonicalJson } from '../chat/tool-calls.js';
import type { ChatAssistantMessage } from '../chat/types.js';
import { FinishReason } from '../engine/events.js';
import type { Model } from '../model/model.js';
import type { StoredTurn } from './store.js';

/**
 * The store key of an assistant message: its first call's id, or (a plain answer) a hash of the
 * tenant scope, the model and the trimmed reasoning and content. Clients send turns back without
 * any id of their own, so a plain answer is known by its text; the scope keeps tenants apart.
 */
export function turnKey(m: Pick<ChatAssistantMessage, 'content' | 'reasoningContent' | 'toolCalls'>, scope: string, fingerprint: string): string | undefined {
  const first = m.toolCalls?.[0];
  if (first) return `call:${first.id}`;
  const reasoning = (m.reasoningContent ?? '').trim();
  const content = (m.content ?? '').trim();
  if (reasoning === '' && content === '') return undefined;
  const h = createHash('sha256').update(`${scope}\u0000${fingerprint}\u0000${reasoning}\u0000${content}`).digest('hex');
  return `text:${h.slice(0, 48)}`;
}

/**
 * Whether the message is the stored turn as the client received it: the same reasoning and
 * content (edge whitespace aside: templates trim it) and the same calls (ids, names, arguments).
 * A client that edited or stripped any of it gets the template's rendering.
 */
export function isSameTurn(s: StoredTurn, m: ChatAssistantMessage): boolean {
  if (s.reasoning.trim() !== (m.reasoningContent ?? '').trim()) return false;
  if (s.content.trim() !== (m.content ?? '').trim()) return false;
  const calls = m.toolCalls ?? [];
  if (calls.length !== s.calls.length) return false;
  return calls.every((c, i) => {
    const stored = s.calls[i]!;
    if (c.id !== stored.id || c.name !== stored.name) return false;
    const args = argumentsObject(c.arguments);
    return args !== undefined && canonicalJson(args) === stored.arguments;
  });
}

/** Collects what one generation wrote, to store it as a whole turn when it ends cleanly. */
export class TurnRecorder {
  readonly #tokens: number[] = [];
  readonly #reasoning: string[] = [];
  readonly #content: string[] = [];
  readonly #calls: StoredTurn['calls'] = [];
  #broken = false;

  tokens(tokens: ArrayLike<number> | undefined): void {
    if (!tokens) return;
    for (let i = 0; i < tokens.length; i++) this.#tokens.push(tokens[i]!);
  }

  reasoning(text: string): void {
    this.#reasoning.push(text);
  }

  /** Text as the client received it. */
  content(text: string): void {
    this.#content.push(text);
  }

  call(id: string, name: string, args: string): void {
    this.#calls.push({ id, name, arguments: args });
  }

  /** A call cut short, or a call the client did not receive (parallel calls off): not a turn to replay. */
  broken(): void {
    this.#broken = true;
  }

  /**
   * The turn to store, or undefined when the generation did not end on its own (a stop string or
   * a length cut leaves tokens the client never saw, or an unclosed span) or wrote nothing.
   */
  turn(model: Model, finish: FinishReason, stop: string | undefined, base: Pick<StoredTurn, 'model' | 'conversation' | 'createdAt'>, scope: string): StoredTurn | undefined {
    if (this.#broken || stop !== undefined || (finish !== FinishReason.Eog && finish !== FinishReason.ToolCall)) return undefined;
    const tokens = this.#tokens.slice();
    // The end-of-generation token is not part of the body: the template's closing renders it.
    while (tokens.length > 0 && model.isEndOfGeneration(tokens[tokens.length - 1]!)) tokens.pop();
    if (tokens.length === 0) return undefined;
    const reasoning = this.#reasoning.join('');
    const content = this.#content.join('');
    const key = turnKey({ content, reasoningContent: reasoning, ...(this.#calls.length ? { toolCalls: this.#calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })) } : {}) }, scope, base.model);
    if (key === undefined) return undefined;
    const t = Int32Array.from(tokens);
    return { ...base, key, reasoning, content, calls: this.#calls.slice(), text: model.detokenize(t, { special: true }), tokens: t };
  }
}
