// Conversations as Sessions: the one place a conversation id (an HTTP header, an Agent's
// conversation, a deprecated string session id) becomes a Session. Each context owns one pool
// (sessionPool(ctx)), shared by the server and the Agent, so both reach the same Session (the
// same pinned sequence) for the same conversation.
import type { Session } from './session.js';

/** Conversations a pool keeps referenced; older ones end through the engine's session TTL. */
export const MAX_POOLED_SESSIONS = 4096;

export class SessionPool {
  readonly #open: (conversationId: string) => Session;
  readonly #max: number;
  /** Most recently used last. */
  readonly #recent = new Map<string, Session>();

  /** `open`: the live Session of that id, or a new one. */
  constructor(open: (conversationId: string) => Session, max = MAX_POOLED_SESSIONS) {
    this.#open = open;
    this.#max = max;
  }

  /** The conversation's Session: the live one, or a new one (it pins a sequence on its first request). */
  get(conversationId: string): Session {
    let s = this.#recent.get(conversationId);
    if (s && !s.ended) this.#recent.delete(conversationId);
    else s = this.#open(conversationId);
    this.#recent.set(conversationId, s);
    if (this.#recent.size > this.#max) this.#recent.delete(this.#recent.keys().next().value as string);
    return s;
  }

  /** How many conversations the pool holds. */
  get size(): number {
    return this.#recent.size;
  }
}
