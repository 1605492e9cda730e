// Conversations as Sessions: the one place a conversation id (an HTTP header, an Agent's
// conversation) becomes a Session. One pool per context, shared by the server and the Agent,
// so both reach the same Session (the same pinned sequence) for the same conversation.
import { sessionFor, type Context } from './context.js';
import type { Session } from './session.js';

/** Conversations the pool keeps referenced; older ones end through the engine's session TTL. */
export const MAX_POOLED_SESSIONS = 4096;

export class SessionPool {
  readonly context: Context;
  readonly #max: number;
  /** Most recently used last. */
  readonly #recent = new Map<string, Session>();

  constructor(context: Context, max = MAX_POOLED_SESSIONS) {
    this.context = context;
    this.#max = max;
  }

  /** The conversation's Session: the live one, or a new one (it pins a sequence on its first request). */
  get(conversationId: string): Session {
    let s = this.#recent.get(conversationId);
    if (s && !s.ended) this.#recent.delete(conversationId);
    else s = sessionFor(this.context, conversationId);
    this.#recent.set(conversationId, s);
    if (this.#recent.size > this.#max) this.#recent.delete(this.#recent.keys().next().value as string);
    return s;
  }

  /** How many conversations the pool holds. */
  get size(): number {
    return this.#recent.size;
  }
}

const pools = new WeakMap<Context, SessionPool>();

/** The context's session pool (made on first use). */
export function sessionPool(context: Context): SessionPool {
  let pool = pools.get(context);
  if (!pool) {
    pool = new SessionPool(context);
    pools.set(context, pool);
  }
  return pool;
}
