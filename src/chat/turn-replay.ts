// Exact replay of whole assistant turns. The model generated a turn (reasoning, answer, calls)
// right after the prompt it was given; templates render that turn back differently (reasoning
// re-laid-out as `\n</think>\n\n`, calls re-serialised), so the prompt of the next request would
// depart from the KV at the turn's start. Where the template renders the turn as
// `<prompt it was generated from><body><closing>`, the body is replaced by the exact generated
// tokens: the next prompt then extends the previous prompt and its generated tokens.
import { createHash, type Hash } from 'node:crypto';
import type { ChatTemplate } from './template.js';
import type { ChatMessage, ChatToolDefinition } from './types.js';

/** The exact text and tokens the model generated for an assistant turn (end-of-generation token excluded). */
export interface TurnReplay {
  text: string;
  tokens: ArrayLike<number>;
}

/** What a template writes around an assistant turn's body. */
export interface TurnShape {
  /** After the body of an assistant turn (e.g. `<|im_end|>\n`). */
  closing: string;
  /** Before a user message's content (e.g. `<|im_start|>user\n`). */
  userHeader: string;
}

// Probe texts no template transforms (no whitespace to trim, no markup).
const PROBE_QUERY = 'llamuxprobequery';
const PROBE_ANSWER = 'llamuxprobeanswer';
const PROBE_NEXT = 'llamuxprobenext';

const shapeCache = new WeakMap<ChatTemplate, Map<string, TurnShape | null>>();

/**
 * The closing and user header of the template (with these variables), probed by rendering a
 * tiny conversation; undefined when the template does not render it recognisably.
 */
export function turnShape(template: ChatTemplate, variables?: Record<string, unknown>): TurnShape | undefined {
  const key = JSON.stringify(variables ?? {});
  let byVars = shapeCache.get(template);
  if (!byVars) {
    byVars = new Map();
    shapeCache.set(template, byVars);
  }
  const hit = byVars.get(key);
  if (hit !== undefined) return hit ?? undefined;
  let shape: TurnShape | null = null;
  try {
    const one = template.renderUnchecked([{ role: 'user', content: PROBE_QUERY }, { role: 'assistant', content: PROBE_ANSWER }], undefined, false, variables);
    const two = template.renderUnchecked(
      [{ role: 'user', content: PROBE_QUERY }, { role: 'assistant', content: PROBE_ANSWER }, { role: 'user', content: PROBE_NEXT }],
      undefined,
      false,
      variables,
    );
    const a = one.lastIndexOf(PROBE_ANSWER);
    const closing = a < 0 ? '' : one.slice(a + PROBE_ANSWER.length);
    const b = two.indexOf(PROBE_ANSWER);
    const n = two.indexOf(PROBE_NEXT);
    if (closing.length > 0 && b >= 0 && n > b) {
      const between = two.slice(b + PROBE_ANSWER.length, n);
      if (between.startsWith(closing)) shape = { closing, userHeader: between.slice(closing.length) };
    }
  } catch {
    // a template that refuses the probe: no turn is replayed whole
  }
  byVars.set(key, shape);
  return shape ?? undefined;
}

/** Renders a conversation (the template's own rendering; throws what the template throws). */
export type Render = (messages: readonly ChatMessage[], addGenerationPrompt: boolean) => string;

export function renderer(template: ChatTemplate, tools: readonly ChatToolDefinition[] | undefined, variables: Record<string, unknown> | undefined): Render {
  return (messages, addGen) => template.renderUnchecked(messages, tools, addGen, variables);
}

/** Where the turn at `index` sits in the template's rendering of the conversation up to and including it. */
export interface TurnBounds {
  /** The prompt the turn was generated from (the conversation before it, with the generation prompt). */
  prompt: string;
  /** The turn as the template renders it last in a conversation: `prompt + body + closing`. */
  rendered: string;
  /** Where the body ends in `rendered` (its closing starts). */
  bodyEnd: number;
}

/**
 * The bounds of the assistant turn at `index`, or undefined when the template does not render it
 * as the prompt it was generated from, a body and the closing.
 */
export function turnBounds(render: Render, shape: TurnShape, messages: readonly ChatMessage[], index: number): TurnBounds | undefined {
  if (index === 0) return undefined;
  let prompt: string;
  let rendered: string;
  try {
    prompt = render(messages.slice(0, index), true);
    rendered = render(messages.slice(0, index + 1), false);
  } catch {
    return undefined;
  }
  const bodyEnd = rendered.length - shape.closing.length;
  if (!rendered.startsWith(prompt) || !rendered.endsWith(shape.closing) || bodyEnd < prompt.length) return undefined;
  return { prompt, rendered, bodyEnd };
}

/**
 * Where the body of the assistant turn at `index` ends in `context`, a rendering of a longer
 * conversation starting with the same messages: either the turn renders there as it does last
 * (`bounds.rendered` is a prefix), or the template re-rendered it because a user message came
 * after it (reasoning dropped): located by rendering the turn followed by a probe user message.
 * Undefined when neither fits.
 */
export function bodyEndIn(render: Render, shape: TurnShape, messages: readonly ChatMessage[], index: number, bounds: TurnBounds, context: string): number | undefined {
  if (context.startsWith(bounds.rendered)) return bounds.bodyEnd;
  let probed: string;
  try {
    probed = render([...messages.slice(0, index + 1), { role: 'user', content: PROBE_NEXT }], false);
  } catch {
    return undefined;
  }
  const at = probed.lastIndexOf(`${shape.closing}${shape.userHeader}${PROBE_NEXT}`);
  if (at < 0 || !context.startsWith(probed.slice(0, at + shape.closing.length))) return undefined;
  return at;
}

/** Where a turn sits, as lengths in the rendering of the conversation up to and including it. */
interface TurnSpan {
  promptLength: number;
  bodyEnd: number;
  renderedLength: number;
  /** SHA-256 of that rendering: the whole prompt must start with it. */
  renderedDigest: string;
}

const MAX_CACHED_SPANS = 50_000;
const spanCache = new WeakMap<ChatTemplate, Map<string, TurnSpan | null>>();

const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');

/**
 * The turns at `indexes` located in `text` (the template's rendering of the whole conversation):
 * their prompt length and body end where the whole prompt starts with the turn's own rendering;
 * `unlocated` where the template does not render it as its prompt, a body and a closing;
 * `elsewhere` where it renders it differently in this conversation. Each turn's bounds take two
 * renderings of the conversation up to it; they are cached (as lengths and a digest) under a hash
 * of everything the rendering depends on, so a conversation that grows turn by turn renders only
 * its newest turns.
 */
export function locateTurns(
  template: ChatTemplate,
  render: Render,
  shape: TurnShape,
  context: { tools: unknown; variables: unknown },
  messages: readonly ChatMessage[],
  indexes: readonly number[],
  text: string,
): Map<number, { promptLength: number; bodyEnd: number } | 'unlocated' | 'elsewhere'> {
  let cache = spanCache.get(template);
  if (!cache) {
    cache = new Map();
    spanCache.set(template, cache);
  }
  const out = new Map<number, { promptLength: number; bodyEnd: number } | 'unlocated' | 'elsewhere'>();
  const wanted = new Set(indexes);
  const spans: Array<{ index: number; span: TurnSpan }> = [];
  let key = sha256(JSON.stringify([context.tools ?? null, context.variables ?? null]));
  const last = Math.max(-1, ...indexes);
  for (let i = 0; i <= last; i++) {
    key = sha256(`${key}\u0000${JSON.stringify(messages[i])}`);
    if (!wanted.has(i)) continue;
    let span = cache.get(key);
    if (span === undefined) {
      const b = turnBounds(render, shape, messages, i);
      span = b ? { promptLength: b.prompt.length, bodyEnd: b.bodyEnd, renderedLength: b.rendered.length, renderedDigest: sha256(b.rendered) } : null;
      cache.set(key, span);
      if (cache.size > MAX_CACHED_SPANS) cache.delete(cache.keys().next().value as string);
    }
    if (span === null) out.set(i, 'unlocated');
    else spans.push({ index: i, span });
  }
  // One pass over the text: the digest of each prefix a turn's rendering must equal.
  spans.sort((a, b) => a.span.renderedLength - b.span.renderedLength);
  const hash: Hash = createHash('sha256');
  let hashed = 0;
  for (const { index, span } of spans) {
    if (span.renderedLength > text.length) {
      out.set(index, 'elsewhere');
      continue;
    }
    hash.update(text.slice(hashed, span.renderedLength));
    hashed = span.renderedLength;
    out.set(index, hash.copy().digest('hex') === span.renderedDigest ? { promptLength: span.promptLength, bodyEnd: span.bodyEnd } : 'elsewhere');
  }
  return out;
}

/** A composed prompt: text, the turns' token regions in it, and where the text is cut. */
export interface ComposedTurns {
  text: string;
  regions: Array<{ start: number; end: number; tokens: ArrayLike<number> }>;
  cuts: number[];
  replayed: number[];
  unlocated: number[];
}

const MAX_CACHED_HEADS = 50_000;
const MAX_CACHED_HEAD_CHARS = 64 * 1024 * 1024;
const headCache = new WeakMap<ChatTemplate, { map: Map<string, string | 'unlocated' | 'fail'>; chars: number }>();

/**
 * keepReasoning: the prompt as the conversation grew. Each replayed turn comes as generated right
 * after the prompt it was generated from, preceded by what the template rendered after the
 * previous replayed turn's body in that prompt (its "head"); the text after the last one comes
 * from the whole conversation's rendering. Heads are cached under a hash of the conversation up
 * to their turn, so a growing conversation renders only its newest turns. Undefined when no turn
 * can be composed or a turn's end cannot be located in what follows it.
 */
export function composeTurns(
  template: ChatTemplate,
  render: Render,
  shape: TurnShape,
  context: { tools: unknown; variables: unknown },
  messages: readonly ChatMessage[],
  turns: ReadonlyMap<number, TurnReplay>,
  rendered: string,
): ComposedTurns | undefined {
  let cache = headCache.get(template);
  if (!cache) {
    cache = { map: new Map(), chars: 0 };
    headCache.set(template, cache);
  }
  const indexes = [...turns.keys()].sort((a, b) => a - b);
  const keys: string[] = [sha256(JSON.stringify([context.tools ?? null, context.variables ?? null]))];
  for (let i = 0; i <= indexes[indexes.length - 1]!; i++) keys.push(sha256(`${keys[i]}\u0000${JSON.stringify(messages[i])}`));
  const bounds = new Map<number, TurnBounds | undefined>();
  const boundsOf = (index: number): TurnBounds | undefined => {
    if (!bounds.has(index)) bounds.set(index, turnBounds(render, shape, messages, index));
    return bounds.get(index);
  };
  const out: ComposedTurns = { text: '', regions: [], cuts: [], replayed: [], unlocated: [] };
  let prev: number | undefined;
  for (const index of indexes) {
    const key = `${keys[index + 1]}:${prev ?? -1}`;
    let head = cache.map.get(key);
    if (head === undefined) {
      const b = boundsOf(index);
      if (!b) head = 'unlocated';
      else if (prev === undefined) head = b.prompt;
      else {
        const end = bodyEndIn(render, shape, messages, prev, boundsOf(prev)!, b.prompt);
        head = end === undefined ? 'fail' : b.prompt.slice(end);
      }
      cache.map.set(key, head);
      cache.chars += head.length;
      while (cache.map.size > MAX_CACHED_HEADS || cache.chars > MAX_CACHED_HEAD_CHARS) {
        const [oldest, value] = cache.map.entries().next().value as [string, string];
        cache.map.delete(oldest);
        cache.chars -= value.length;
      }
    }
    if (head === 'unlocated') {
      out.unlocated.push(index);
      continue;
    }
    if (head === 'fail') return undefined;
    const turn = turns.get(index)!;
    out.text += head;
    out.cuts.push(out.text.length);
    out.regions.push({ start: out.text.length, end: out.text.length + turn.text.length, tokens: turn.tokens });
    out.text += turn.text;
    out.replayed.push(index);
    prev = index;
  }
  if (prev === undefined) return undefined;
  const b = boundsOf(prev);
  const end = b ? bodyEndIn(render, shape, messages, prev, b, rendered) : undefined;
  if (end === undefined) return undefined;
  out.text += rendered.slice(end);
  return out;
}
