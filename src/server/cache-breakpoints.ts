// Anthropic prompt caching: `cache_control` breakpoints on tools, system blocks and message
// blocks (or the request's own, on its last block) become token positions of the rendered
// prompt (located by the prompt worker: the last token boundary at or before each, the prompt
// tokenized exactly as without breakpoints), then the engine's `retainPrefixes`
// (native/kv/prefix_retention.h): the prefix up to each is saved to the RAM and disk tiers
// when a request prefills it and kept there for its ttl, ahead of unretained states. This
// module validates the breakpoints, builds what the worker needs to locate them, turns the
// engine's report into Anthropic's usage numbers, and says when the tiers refused.
import { randomBytes } from 'node:crypto';
import { z } from 'zod';

import type { Context } from '../engine/context.js';
import { HttpError } from './http.js';
import type { MarkVariant, PromptMarks } from './prompt-marks.js';
import type { ChatService, ServerLog } from './service.js';

/** Anthropic's `cache_control`: `ephemeral`, with a ttl of 5 minutes (default) or 1 hour. */
export const CacheControlSchema = z.object({ type: z.literal('ephemeral'), ttl: z.enum(['5m', '1h']).optional() }).strict();
export type CacheTtl = '5m' | '1h';

/** Anthropic allows at most this many blocks with `cache_control` in one request. */
export const MAX_BREAKPOINTS = 4;

/** The smallest prefix the tiers can find again: one 16-token block (native RamTier). */
export const MIN_RETAINED_TOKENS = 16;

// The shapes this module reads of a Messages request (anthropic.ts owns the schema).
type Control = z.output<typeof CacheControlSchema> | undefined;
interface TextLike {
  type: 'text';
  text: string;
  cache_control?: unknown;
}
type BlockLike =
  | TextLike
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown>; cache_control?: unknown }
  | { type: 'tool_result'; tool_use_id: string; content?: string | TextLike[]; is_error?: boolean; cache_control?: unknown }
  | { type: 'thinking'; thinking: string; signature?: string }
  | { type: 'redacted_thinking'; data: string }
  | { type: 'image'; source: unknown; cache_control?: unknown };
interface MessageLike {
  role: 'user' | 'assistant';
  content: string | BlockLike[];
}
interface ToolLike {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
  cache_control?: unknown;
}
export interface CacheableRequest {
  system?: string | TextLike[];
  messages: MessageLike[];
  tools?: ToolLike[];
}

/** The request as the prompt worker renders it (anthropic.ts's conversion). */
export type ToChat = (r: CacheableRequest) => MarkVariant;

/** A breakpoint and the conversations the worker compares the prompt with to locate it. */
export interface Breakpoint {
  ttl: CacheTtl;
  /** Where it sits in the request, for messages (`system.0`, `messages.3.content.1`, `tools.2`). */
  path: string;
  variants: MarkVariant[];
  /** A text-like block: the request with `mark` appended to its text (one rendering locates all such marks). */
  appendMark?: (r: CacheableRequest, mark: string) => CacheableRequest;
}

// Appended text that renders differently from its first character on (A vs B): where the
// renderings stop agreeing with the prompt is exactly the end of the block's text.
const MARK_A = 'A\u2063llamux-cache-mark\u2063';
const MARK_B = 'B\u2063llamux-cache-mark\u2063';

function withText<T extends TextLike>(b: T, mark: string): T {
  return { ...b, text: b.text + mark };
}

function markedBlock(b: BlockLike, mark: string): BlockLike {
  if (b.type === 'text') return withText(b, mark);
  if (b.type === 'tool_result') {
    const c = b.content;
    if (c === undefined || typeof c === 'string') return { ...b, content: (c ?? '') + mark };
    if (c.length === 0) return { ...b, content: mark };
    return { ...b, content: [...c.slice(0, -1), withText(c[c.length - 1]!, mark)] };
  }
  return b;
}

const markTool = (mark: string): ToolLike => ({ name: `${mark[0]}_llamux_cache_mark`, description: mark, input_schema: { type: 'object', properties: {} } });
const markCall = (mark: string): BlockLike => ({ type: 'tool_use', id: `toolu_${mark[0]}llamuxmark`, name: `${mark[0]}_llamux_cache_mark`, input: {} });

/** `path`: the owner of the field (`system.0`), or '' for the request's own. */
function control(v: unknown, path: string): Control {
  if (v === undefined || v === null) return undefined;
  const field = path === '' ? 'cache_control' : `${path}.cache_control`;
  const parsed = CacheControlSchema.safeParse(v);
  if (!parsed.success) {
    const ttl = (v as { ttl?: unknown })?.ttl;
    const why = ttl !== undefined && ttl !== '5m' && ttl !== '1h' ? `ttl must be "5m" or "1h", not ${JSON.stringify(ttl)}` : 'expected {"type": "ephemeral", "ttl"?: "5m" | "1h"}';
    throw new HttpError(400, 'invalid_request', `${field}: ${why}`, field);
  }
  return parsed.data;
}

/**
 * The request's breakpoints in prompt order (tools, system, messages), each with the altered
 * conversations that locate it.
 * @throws HttpError 400: a malformed cache_control, more than 4, or a 1h one after a 5m one
 */
export function collectBreakpoints(r: CacheableRequest, toChat: ToChat): Breakpoint[] {
  const out: Breakpoint[] = [];
  const add = (c: Control, path: string, variants: () => CacheableRequest[], appendMark?: Breakpoint['appendMark']): void => {
    if (c) out.push({ ttl: c.ttl ?? '5m', path, variants: variants().map(toChat), ...(appendMark ? { appendMark } : {}) });
  };
  const textMark = (c: Control, path: string, appendMark: NonNullable<Breakpoint['appendMark']>): void =>
    add(c, path, () => [MARK_A, MARK_B].map((m) => appendMark(r, m)), appendMark);
  const tools = r.tools ?? [];
  tools.forEach((t, i) => {
    // A tool's rendering starts with the same text as any other (the template's JSON), so
    // two inserted tools cannot tell where it ends; what follows it in every case can: a
    // tool inserted after it, and nothing after it.
    add(control(t.cache_control, `tools.${i}`), `tools.${i}`, () => {
      const head = tools.slice(0, i + 1);
      const rest = tools.slice(i + 1);
      return [
        { ...r, tools: [...head, markTool(MARK_A), ...rest] },
        { ...r, tools: [...head, markTool(MARK_B), ...rest] },
        { ...r, tools: head },
      ];
    });
  });
  if (Array.isArray(r.system)) {
    const system = r.system;
    system.forEach((b, j) => {
      textMark(control(b.cache_control, `system.${j}`), `system.${j}`, (q, m) => ({
        ...q,
        system: (q.system as TextLike[]).map((x, k) => (k === j ? withText(x, m) : x)),
      }));
    });
  }
  r.messages.forEach((msg, i) => {
    if (typeof msg.content === 'string') return;
    const blocks = msg.content;
    blocks.forEach((b, j) => {
      const path = `messages.${i}.content.${j}`;
      const c = 'cache_control' in b ? control(b.cache_control, path) : undefined;
      const withBlocks = (bs: BlockLike[]): CacheableRequest => ({ ...r, messages: r.messages.map((m, k) => (k === i ? { ...m, content: bs } : m)) });
      if (b.type === 'tool_use') {
        add(c, path, () => [
          withBlocks([...blocks.slice(0, j + 1), markCall(MARK_A), ...blocks.slice(j + 1)]),
          withBlocks([...blocks.slice(0, j + 1), markCall(MARK_B), ...blocks.slice(j + 1)]),
          { ...r, messages: [...r.messages.slice(0, i), { ...msg, content: blocks.slice(0, j + 1) }] },
        ]);
      } else {
        textMark(c, path, (q, m) => ({
          ...q,
          messages: q.messages.map((x, k) => (k === i && typeof x.content !== 'string' ? { ...x, content: x.content.map((y, l) => (l === j ? markedBlock(y, m) : y)) } : x)),
        }));
      }
    });
  });
  if (out.length > MAX_BREAKPOINTS) {
    throw new HttpError(400, 'invalid_request', `A maximum of ${MAX_BREAKPOINTS} blocks with cache_control may be provided. Found ${out.length}.`);
  }
  const firstShort = out.findIndex((b) => b.ttl === '5m');
  const lateLong = out.findIndex((b, i) => b.ttl === '1h' && firstShort >= 0 && i > firstShort);
  if (lateLong >= 0) {
    throw new HttpError(400, 'invalid_request', `${out[lateLong]!.path}.cache_control: a ttl="1h" breakpoint must not come after a ttl="5m" one (${out[firstShort]!.path}); longer ttls come first`);
  }
  return out;
}

/**
 * Anthropic's request-level `cache_control` (automatic caching): a breakpoint on the last block
 * that can carry one (thinking blocks cannot), so it moves on with the conversation. The request
 * is returned with it placed there (a string content becomes one text block, which renders the
 * same); a block with a cache_control of its own keeps it. Without one, the request unchanged.
 * @throws HttpError 400: a malformed cache_control
 */
export function withAutomaticBreakpoint<R extends CacheableRequest>(r: R, v: unknown): R {
  const c = control(v, '');
  if (!c) return r;
  for (let i = r.messages.length - 1; i >= 0; i--) {
    const msg = r.messages[i]!;
    const blocks: BlockLike[] = typeof msg.content === 'string' ? (msg.content.length > 0 ? [{ type: 'text', text: msg.content }] : []) : msg.content;
    let j = blocks.length - 1;
    while (j >= 0 && (blocks[j]!.type === 'thinking' || blocks[j]!.type === 'redacted_thinking')) j--;
    if (j < 0) continue;
    const b = blocks[j]!;
    if ('cache_control' in b && b.cache_control !== undefined && b.cache_control !== null) return r;
    const marked = blocks.map((x, k) => (k === j ? { ...x, cache_control: c } : x));
    return { ...r, messages: r.messages.map((m, k) => (k === i ? { ...m, content: marked } : m)) } as R;
  }
  return r;
}

/**
 * What the prompt worker needs to locate the breakpoints: every text-like one in one rendering
 * (each block followed by a mark of its own, unique to this request), the variants for the rest
 * and as the fallback.
 */
export function promptMarks(r: CacheableRequest, breakpoints: readonly Breakpoint[], toChat: ToChat): PromptMarks {
  const nonce = randomBytes(6).toString('hex');
  const texts = breakpoints.map((b, k) => (b.appendMark ? `Lmx${nonce}m${k}Q` : undefined));
  let marked: CacheableRequest | undefined;
  breakpoints.forEach((b, k) => {
    if (b.appendMark) marked = b.appendMark(marked ?? r, texts[k]!);
  });
  return { ...(marked ? { marked: { variant: toChat(marked), texts } } : {}), variants: breakpoints.map((b) => b.variants) };
}

/** How long a breakpoint's prefix is retained, per ttl (the server's `promptCacheTtlMs`). */
export interface PromptCacheTtls {
  '5m': number;
  '1h': number;
}
export const DEFAULT_TTLS: PromptCacheTtls = { '5m': 5 * 60_000, '1h': 60 * 60_000 };

export interface PromptCacheOptions {
  ttlMs: PromptCacheTtls;
  log: ServerLog;
  /** Tenant isolation: scoped KV never enters the shared tiers, so no breakpoint is kept. */
  isolateTenants: boolean;
}

/** A request's breakpoints after the prompt was built: the engine's retainPrefixes and what is known already. */
export interface RetentionPlan {
  retainPrefixes: Array<{ tokens: number; ttlMs: number }>;
  /** Token position and ttl of each breakpoint, in prompt order (0: not located). */
  positions: Array<{ tokens: number; ttl: CacheTtl }>;
  /** Why breakpoints are refused before the engine sees them (none located, the prompt cut, no tier, a tenant). */
  refusedBefore: { count: number; reason: string } | undefined;
}

/** Anthropic usage numbers from the engine's report. */
export interface CacheUsage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
}

/** Prompt caching of one server: ttls, the refusal log (each reason once), the header. */
export class PromptCache {
  readonly #o: PromptCacheOptions;
  readonly #context: Context;
  readonly #logged = new Set<string>();

  constructor(context: Context, o: PromptCacheOptions) {
    this.#context = context;
    this.#o = o;
  }

  /** Turns located breakpoints into the engine's retainPrefixes. */
  plan(breakpoints: readonly Breakpoint[], markTokens: readonly number[], promptTokens: number, truncated: boolean, tenant: string | undefined): RetentionPlan {
    const positions = breakpoints.map((b, i) => ({ tokens: truncated ? 0 : Math.min(markTokens[i] ?? 0, promptTokens), ttl: b.ttl }));
    if (breakpoints.length === 0) return { retainPrefixes: [], positions, refusedBefore: undefined };
    const stats = this.#context.cacheStats();
    let reason: string | undefined;
    if (truncated) reason = 'truncated';
    else if (this.#o.isolateTenants && tenant !== undefined) reason = 'tenant';
    else if (stats.ramBudget === 0 && stats.diskBudget === 0) reason = 'no-tier';
    if (reason !== undefined) return { retainPrefixes: [], positions, refusedBefore: { count: breakpoints.length, reason } };
    // one entry per position (the longest ttl), ascending: the engine saves each once
    const byTokens = new Map<number, number>();
    let unlocated = 0;
    for (const p of positions) {
      if (p.tokens <= 0) {
        unlocated++;
        continue;
      }
      byTokens.set(p.tokens, Math.max(byTokens.get(p.tokens) ?? 0, this.#o.ttlMs[p.ttl]));
    }
    const retainPrefixes = [...byTokens.entries()].sort((a, b) => a[0] - b[0]).map(([tokens, ttlMs]) => ({ tokens, ttlMs }));
    return { retainPrefixes, positions, refusedBefore: unlocated > 0 ? { count: unlocated, reason: 'unlocated' } : undefined };
  }

  /**
   * Anthropic's numbers: read = the prompt tokens reused; creation = the tokens this request
   * prefilled up to the longest breakpoint it wrote (none when the tiers refused it); input =
   * the rest.
   */
  usage(plan: RetentionPlan | undefined, promptTokens: number, cachedTokens: number, retainedTokens: number): CacheUsage {
    const creation = retainedTokens > cachedTokens ? retainedTokens - cachedTokens : 0;
    let longTokens = 0;
    for (const p of plan?.positions ?? []) if (p.ttl === '1h' && p.tokens > 0 && p.tokens <= retainedTokens) longTokens = Math.max(longTokens, p.tokens);
    const long = Math.max(0, Math.min(longTokens - cachedTokens, creation));
    return {
      input_tokens: promptTokens - cachedTokens - creation,
      cache_creation_input_tokens: creation,
      cache_read_input_tokens: cachedTokens,
      cache_creation: { ephemeral_5m_input_tokens: creation - long, ephemeral_1h_input_tokens: long },
    };
  }

  /**
   * The `x-llamux-cache-retention` header value (undefined without breakpoints): `kept`, or
   * `refused=N; reason=...` (logged once per reason).
   */
  report(plan: RetentionPlan | undefined, refusedByEngine: number): string | undefined {
    if (!plan || plan.positions.length === 0) return undefined;
    let count = plan.refusedBefore?.count ?? 0;
    let reason = plan.refusedBefore?.reason;
    if (refusedByEngine > 0) {
      count += refusedByEngine;
      const short = plan.retainPrefixes.some((p) => p.tokens < MIN_RETAINED_TOKENS);
      reason ??= short ? 'short' : 'budget';
    }
    if (count === 0 || reason === undefined) return 'kept';
    if (!this.#logged.has(reason)) {
      this.#logged.add(reason);
      this.#o.log('warn', `Prompt-cache breakpoints (cache_control) were not kept: ${REASONS[reason] ?? reason}. Their prefixes are prefilled again when evicted; the response says so in x-llamux-cache-retention (logged once per reason)`);
    }
    return `refused=${count}; reason=${reason}`;
  }
}

const REASONS: Record<string, string> = {
  'no-tier': 'the server has neither a RAM tier (--cache-ram-mb 0) nor a disk tier (--cache-dir)',
  budget: 'a prefix state is larger than the RAM tier budget and no disk tier took it (raise --cache-ram-mb or add --cache-dir)',
  short: `a prefix is shorter than ${MIN_RETAINED_TOKENS} tokens, the tiers' block`,
  tenant: 'with tenant isolation, KV stays out of the shared tiers',
  truncated: 'the prompt was cut in the middle (--overflow truncate-middle)',
  unlocated: 'the chat template renders the conversation differently after a breakpoint, so its position is unknown',
};

const caches = new WeakMap<ChatService, PromptCache>();

/** Sets a server's prompt caching up (server.ts, once). */
export function configurePromptCache(service: ChatService, o: PromptCacheOptions): void {
  caches.set(service, new PromptCache(service.context, o));
}

/** The server's prompt caching (defaults when the server did not configure it). */
export function promptCacheOf(service: ChatService): PromptCache {
  let c = caches.get(service);
  if (!c) {
    c = new PromptCache(service.context, { ttlMs: DEFAULT_TTLS, log: () => {}, isolateTenants: false });
    caches.set(service, c);
  }
  return c;
}

