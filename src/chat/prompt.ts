// Chat prompt building with exact tool-call replay: the template renders the conversation, the
// text parts are tokenized, and every assistant tool call whose exact tokens are known is
// spliced in verbatim, so the KV computed while the model generated it is reused.
import type { Context } from '../engine/context.js';
import { LlamuxError, isLlamuxError } from '../errors.js';
import { TokenAttribute, type Model } from '../model/model.js';
import type { ChatTemplate } from './template.js';
import { tokenBoundaryAt } from './token-offsets.js';
import { composeTurns, locateTurns, renderer, turnShape, type TurnReplay } from './turn-replay.js';
import type { ChatMessage, ChatToolCall, ChatToolDefinition } from './types.js';

/** What llamux knows of a tool call the model generated: its exact span. */
export interface ReplaySpan {
  /** The exact bytes between the start and end markers. */
  text: string;
  /** The exact tokens of the span, start and end markers included. */
  tokens: ArrayLike<number>;
  /**
   * Text the model generated in the same turn just before this span (after the previous span or
   * the turn start), with its exact tokens. Spliced too when the template renders the assistant
   * content byte-identically.
   */
  prelude?: { text: string; tokens: ArrayLike<number> };
}

/** Marker texts as they appear in rendered prompts. */
export interface MarkerTexts {
  start: string;
  end: string;
}

export interface BuildChatPromptOptions {
  template: ChatTemplate;
  tools?: readonly ChatToolDefinition[];
  /** Default true. */
  addGenerationPrompt?: boolean;
  variables?: Record<string, unknown>;
  /** The tool-call markers as text; without them nothing is replayed. */
  markers?: MarkerTexts;
  /** The stored span of a historical call, or undefined to render the call through the template. */
  replay?: (call: ChatToolCall, messageIndex: number) => ReplaySpan | undefined;
  /**
   * The exact generated tokens of a whole historical assistant turn (the caller checked that the
   * message is the turn as generated), or undefined. Spliced in place of the template's
   * rendering of the turn's body where the template renders the turn as the prompt it was
   * generated from, a body and a closing (src/chat/turn-replay.ts).
   */
  replayTurn?: (message: ChatMessage, messageIndex: number) => TurnReplay | undefined;
  /**
   * Keep replayed turns as generated even where the template would re-render them once a later
   * user message follows (templates that drop earlier reasoning): a departure from the template
   * that keeps the prompt an extension of the previous one.
   */
  keepReasoning?: boolean;
  /**
   * Parse special-token text (e.g. `<|im_start|>`) inside message contents. Off by default: a
   * user who types a control token gets its characters, not the token. Template text is always
   * parsed.
   */
  parseSpecialInContent?: boolean;
  /**
   * The most tokens the prompt may have: tokenizing stops (CONTEXT_OVERFLOW) as soon as the prompt
   * is known to be longer, so text far too long for the context costs little work.
   */
  maxTokens?: number;
  /** Placeholders in message contents and the tokens that replace them (src/chat/media.ts). */
  media?: ReadonlyMap<string, ArrayLike<number>>;
  /**
   * Character offsets of the rendered text (given it) whose token positions the caller needs
   * (prompt-cache breakpoints). They never change the tokenization (the tokens are those of the
   * same call without marks): each is the last token boundary at or before its offset.
   */
  marks?: (text: string) => readonly number[];
}

export interface ChatPrompt {
  /** The rendered template text (tool calls as the template renders them). */
  text: string;
  /** The prompt tokens, with replayed spans spliced in. */
  tokens: Int32Array;
  /** Ids of calls whose stored exact tokens were spliced in. */
  replayed: string[];
  /** Ids of calls rendered through the template because no stored span was given. */
  unknown: string[];
  /** Ids of calls that had a stored span but whose rendering could not be located in the prompt. */
  unlocated: string[];
  /** Ids of stored calls not spliced because their turn renders differently before them than it was generated. */
  rerendered: string[];
  /** Tokens inserted verbatim (spans, preludes and whole turns). */
  splicedTokens: number;
  /** Whole-turn replay: indexes of the assistant messages spliced, not located, and re-rendered in context (dropped). */
  turns: { replayed: number[]; unlocated: number[]; dropped: number[] };
  /**
   * With `marks`: the tokens that end at or before each mark (a mark inside a spliced span
   * counts the tokens before the span).
   */
  markTokens: number[];
}

type Segment = { kind: 'text'; text: string; parseSpecial: boolean; from: number } | { kind: 'tokens'; tokens: ArrayLike<number>; from: number; to: number };

interface Region {
  start: number;
  end: number;
  tokens: ArrayLike<number>;
}

const protectionCache = new WeakMap<Model, Map<string, boolean>>();
const controlTextCache = new WeakMap<Model, string[]>();

/** The texts of the control and unknown tokens: what parse_special adds to the partition. */
function controlTexts(model: Model): string[] {
  let out = controlTextCache.get(model);
  if (!out) {
    out = [];
    for (let t = 0; t < model.vocab.size; t++) {
      const info = model.tokenInfo(t);
      if ((info.attributes & (TokenAttribute.CONTROL | TokenAttribute.UNKNOWN)) !== 0 && info.text !== '') out.push(info.text);
    }
    controlTextCache.set(model, out);
  }
  return out;
}

/**
 * Whether parse_special would turn some of `text` into control tokens. `maxTokens`: the text is
 * part of a prompt that may hold at most this many tokens; CONTEXT_OVERFLOW when it cannot fit.
 */
function containsControlText(model: Model, text: string, maxTokens?: number): boolean {
  if (text.length === 0) return false;
  let cache = protectionCache.get(model);
  if (!cache) {
    cache = new Map();
    protectionCache.set(model, cache);
  }
  const cacheable = text.length <= 65_536;
  if (cacheable) {
    const hit = cache.get(text);
    if (hit !== undefined) return hit;
  }
  // Without any control-token text, parse_special splits nothing more: no tokenizing needed.
  if (!controlTexts(model).some((c) => text.includes(c))) {
    if (cacheable) cache.set(text, false);
    return false;
  }
  // Either way the text ends up tokenized as `b` (without parse_special when they differ): when
  // `b` alone overflows the prompt, so does the prompt.
  const limit = maxTokens === undefined ? {} : { maxTokens: maxTokens + 16 };
  const b = model.tokenize(text, { addSpecial: false, parseSpecial: false, ...limit });
  let a: Int32Array;
  try {
    a = model.tokenize(text, { addSpecial: false, parseSpecial: true, ...limit });
  } catch (e) {
    if (!isLlamuxError(e, 'CONTEXT_OVERFLOW')) throw e;
    return true; // more tokens than `b`: they differ
  }
  let differs = a.length !== b.length;
  for (let i = 0; !differs && i < a.length; i++) differs = a[i] !== b[i];
  if (cacheable) {
    cache.set(text, differs);
    if (cache.size > 4096) cache.delete(cache.keys().next().value as string);
  }
  return differs;
}

/** The context's tool-call markers as text, or undefined when it has none. */
export function markerTexts(ctx: Context): MarkerTexts | undefined {
  const m = ctx.markers;
  if (!m) return undefined;
  return {
    start: ctx.model.detokenize(m.start, { special: true }),
    end: ctx.model.detokenize(m.end, { special: true }),
  };
}

function contentsOf(m: ChatMessage): string[] {
  if (m.role === 'assistant') return m.content ? [m.content] : [];
  if (typeof m.content !== 'string') return m.content.flatMap((p) => (p.type === 'text' ? [p.text] : []));
  return [m.content];
}

/**
 * Ranges of untrusted content that contain control-token text: tokenized with parse_special off.
 * Located by searching each such content, in message order, in the rendered text. Whole turns
 * spliced as tokens (`spliced`: their message indexes and regions) are never searched: their
 * contents are tokens already, and a later content is not matched inside them.
 */
function protectedRanges(
  model: Model,
  text: string,
  messages: readonly ChatMessage[],
  maxTokens?: number,
  spliced: { messages: ReadonlySet<number>; regions: readonly Region[] } = { messages: new Set(), regions: [] },
): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let cursor = 0;
  /** The first occurrence at or after `from` outside the spliced turns. */
  const find = (needle: string, from: number): number => {
    let at = text.indexOf(needle, from);
    for (;;) {
      if (at < 0) return at;
      const inside = spliced.regions.find((r) => at < r.end && at + needle.length > r.start);
      if (!inside) return at;
      at = text.indexOf(needle, inside.end);
    }
  };
  for (const [i, m] of messages.entries()) {
    if (spliced.messages.has(i)) continue;
    for (const c of contentsOf(m)) {
      if (!containsControlText(model, c, maxTokens)) continue;
      let at = find(c, cursor);
      let len = c.length;
      if (at < 0) {
        const escaped = JSON.stringify(c).slice(1, -1);
        at = find(escaped, cursor);
        len = escaped.length;
      }
      if (at < 0) {
        throw new LlamuxError(
          'INVALID_ARGUMENT',
          `A ${m.role} message contains special-token text that the chat template transforms, so it cannot be kept out of the control tokens; remove the special-token text or enable parseSpecialInContent for trusted input`,
        );
      }
      out.push([at, at + len]);
      cursor = at + len;
    }
  }
  return out;
}

function stringLeaves(v: unknown, out: string[]): void {
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) for (const x of v) stringLeaves(x, out);
  else if (v !== null && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      out.push(k);
      stringLeaves(x, out);
    }
  }
}

/** Every occurrence of tool-definition strings (names, descriptions, schema text) that contain control-token text. */
function protectedToolRanges(model: Model, text: string, tools: readonly ChatToolDefinition[], maxTokens?: number): Array<[number, number]> {
  const strings: string[] = [];
  for (const t of tools) stringLeaves([t.name, t.description ?? '', t.parameters ?? {}], strings);
  const out: Array<[number, number]> = [];
  for (const s of new Set(strings)) {
    if (!containsControlText(model, s, maxTokens)) continue;
    let found = false;
    for (const form of new Set([s, JSON.stringify(s).slice(1, -1)])) {
      for (let at = text.indexOf(form); at >= 0; at = text.indexOf(form, at + form.length)) {
        out.push([at, at + form.length]);
        found = true;
      }
    }
    if (!found) {
      throw new LlamuxError('INVALID_ARGUMENT', 'A tool definition contains special-token text that the chat template transforms, so it cannot be kept out of the control tokens; remove the special-token text');
    }
  }
  return out;
}

/** Merges overlapping ranges. */
function mergeRanges(ranges: Array<[number, number]>): Array<[number, number]> {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const out: Array<[number, number]> = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last && r[0] <= last[1]) last[1] = Math.max(last[1], r[1]);
    else out.push([r[0], r[1]]);
  }
  return out;
}

/**
 * Renders a conversation and tokenizes it for generation. Historical tool calls for which
 * `replay` returns a stored span are spliced in as their exact tokens; the rest of the text is
 * tokenized piecewise (template text with parse_special, untrusted content containing control
 * text without). Cut points sit where the previous turn's prompt ended, so a prompt always
 * extends the token sequence of the turn before it.
 *
 * @throws LlamuxError INVALID_ARGUMENT (the template refuses the conversation, or content with
 *   control-token text cannot be located)
 */
export function buildChatPrompt(model: Model, messages: readonly ChatMessage[], options: BuildChatPromptOptions): ChatPrompt {
  const { template, tools, variables, markers, replay } = options;
  const addGen = options.addGenerationPrompt ?? true;
  const rendered = template.renderUnchecked(messages, tools, addGen, variables);
  const regions: Region[] = [];
  const cuts: number[] = [];
  const replayed: string[] = [];
  const unknown: string[] = [];
  const unlocated: string[] = [];
  const rerendered: string[] = [];
  let cursor = 0;

  const whole = wholeTurns(messages, rendered, options);
  const text = whole.text;
  regions.push(...whole.regions);
  cuts.push(...whole.cuts);
  for (const i of whole.turns.replayed) {
    const m = messages[i]!;
    if (m.role === 'assistant') for (const c of m.toolCalls ?? []) replayed.push(c.id);
  }
  const spliced = new Set(whole.turns.replayed);

  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!;
    if (m.role !== 'assistant' || !m.toolCalls || m.toolCalls.length === 0 || spliced.has(i)) continue;
    const calls = m.toolCalls;
    const spans = calls.map((c) => (markers && replay ? replay(c, i) : undefined));
    for (let j = 0; j < calls.length; j++) if (!spans[j]) unknown.push(calls[j]!.id);
    if (spans.every((s) => !s)) continue;
    const fail = (): void => {
      for (let j = 0; j < calls.length; j++) if (spans[j]) unlocated.push(calls[j]!.id);
    };
    if (i === 0 || !markers) {
      fail();
      continue;
    }
    let prefix: string;
    try {
      prefix = template.renderUnchecked(messages.slice(0, i), tools, true, variables);
    } catch {
      fail();
      continue;
    }
    if (prefix.length < cursor || !text.startsWith(prefix)) {
      fail();
      continue;
    }
    // Locate each call's rendered block, in order, after the assistant header.
    const blocks: Array<{ gapStart: number; start: number; end: number }> = [];
    let pos = prefix.length;
    let ok = true;
    for (const call of calls) {
      const s = text.indexOf(markers.start, pos);
      const e = s < 0 ? -1 : text.indexOf(markers.end, s + markers.start.length);
      if (s < 0 || e < 0 || !text.slice(s, e).includes(call.name)) {
        ok = false;
        break;
      }
      blocks.push({ gapStart: pos, start: s, end: e + markers.end.length });
      pos = e + markers.end.length;
    }
    if (!ok) {
      fail();
      continue;
    }
    cuts.push(prefix.length);
    // The turn renders differently before its first call than it was generated (reasoning
    // stripped or re-laid-out, content the template puts before calls the model wrote first):
    // the KV cannot hold the calls' tokens past that point, so splicing them would only lengthen
    // the prompt. The calls are rendered and tokenized like any text.
    const firstGap = text.slice(blocks[0]!.gapStart, blocks[0]!.start);
    const firstPrelude = spans[0]?.prelude?.text;
    if (spans[0] && firstGap.length > 0 && firstGap !== firstPrelude) {
      for (let j = 0; j < calls.length; j++) if (spans[j]) rerendered.push(calls[j]!.id);
      cursor = pos;
      continue;
    }
    for (let j = 0; j < calls.length; j++) {
      const span = spans[j];
      const b = blocks[j]!;
      if (!span) continue;
      const gap = text.slice(b.gapStart, b.start);
      if (span.prelude && gap.length > 0 && gap === span.prelude.text) {
        regions.push({ start: b.gapStart, end: b.end, tokens: concatTokens(span.prelude.tokens, span.tokens) });
      } else {
        regions.push({ start: b.start, end: b.end, tokens: span.tokens });
      }
      replayed.push(calls[j]!.id);
    }
    cursor = pos;
  }

  // Media: each placeholder's tokens replace it where the template put it.
  if (options.media && options.media.size > 0) {
    for (const [placeholder, toks] of options.media) {
      const at = text.indexOf(placeholder);
      if (at < 0 || regions.some((r) => at < r.end && at + placeholder.length > r.start)) {
        throw new LlamuxError('INVALID_ARGUMENT', 'The chat template does not render a media part of a user message (it drops or rewrites the content)');
      }
      regions.push({ start: at, end: at + placeholder.length, tokens: toks });
    }
  }
  regions.sort((a, b) => a.start - b.start);
  const maxTokens = options.maxTokens;
  const splicedTurns = { messages: spliced, regions: whole.regions };
  const marks = options.marks ? [...options.marks(text)] : [];
  const prot = options.parseSpecialInContent ? [] : mergeRanges([...protectedRanges(model, text, messages, maxTokens, splicedTurns), ...protectedToolRanges(model, text, tools ?? [], maxTokens)]);
  const segments = segment(text, regions, cuts, prot);
  const addBos = !(template.bosToken !== '' && text.startsWith(template.bosToken));
  const parts: ArrayLike<number>[] = [];
  let total = 0;
  let splicedTokens = 0;
  let first = true;
  // A mark counts the tokens of the segments that end at or before it, plus, inside a text
  // segment, its tokens that end at or before it (token-offsets.ts).
  const markTokens = marks.map(() => 0);
  const pieces = new Map<number, Uint8Array>();
  for (const seg of segments) {
    marks.forEach((m, i) => {
      if (seg.from < m) markTokens[i] = total;
    });
    let toks: ArrayLike<number>;
    let lead = 0;
    if (seg.kind === 'tokens') {
      toks = seg.tokens;
      splicedTokens += toks.length;
    } else {
      // Past maxTokens the prompt cannot fit: stop there (CONTEXT_OVERFLOW).
      const left = maxTokens === undefined ? {} : { maxTokens: Math.max(1, maxTokens - total) };
      toks = model.tokenize(seg.text, { addSpecial: first && addBos, parseSpecial: seg.parseSpecial, ...left });
      if (first && addBos && marks.length > 0) lead = leadingSpecial(model, toks);
    }
    first = false;
    parts.push(toks);
    const end = seg.kind === 'text' ? seg.from + seg.text.length : seg.to;
    if (seg.kind === 'text') {
      marks.forEach((m, i) => {
        if (m > seg.from && m < end) markTokens[i] = total + tokenBoundaryAt(model, toks, seg.text, m - seg.from, lead, pieces);
      });
    }
    total += toks.length;
    marks.forEach((m, i) => {
      if (end <= m) markTokens[i] = total;
    });
  }
  if (segments.length === 0 && addBos) {
    const bos = model.tokenize('', { addSpecial: true });
    parts.push(bos);
    total += bos.length;
  }
  const tokens = new Int32Array(total);
  let o = 0;
  for (const p of parts) {
    tokens.set(p, o);
    o += p.length;
  }
  return { text, tokens, replayed, unknown, unlocated, rerendered, splicedTokens, turns: whole.turns, markTokens };
}

interface WholeTurns {
  /** The prompt text: the template's rendering, or (keepReasoning) the composition of the turns' prompts. */
  text: string;
  regions: Region[];
  cuts: number[];
  turns: ChatPrompt['turns'];
}

/** The whole assistant turns spliced into the prompt (see BuildChatPromptOptions.replayTurn). */
function wholeTurns(messages: readonly ChatMessage[], rendered: string, options: BuildChatPromptOptions): WholeTurns {
  const out: WholeTurns = { text: rendered, regions: [], cuts: [], turns: { replayed: [], unlocated: [], dropped: [] } };
  const { replayTurn, template } = options;
  const shape = replayTurn ? turnShape(template, options.variables) : undefined;
  if (!replayTurn) return out;
  const render = renderer(template, options.tools, options.variables);
  const turns = new Map<number, TurnReplay>();
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!;
    if (m.role !== 'assistant') continue;
    const turn = replayTurn(m, i);
    if (turn) turns.set(i, turn);
  }
  if (turns.size === 0) return out;
  if (!shape) {
    out.turns.unlocated.push(...turns.keys());
    return out;
  }
  if (options.keepReasoning) {
    const composed = composeTurns(template, render, shape, { tools: options.tools, variables: options.variables }, messages, turns, rendered);
    if (composed) return { text: composed.text, regions: composed.regions, cuts: composed.cuts, turns: { replayed: composed.replayed, unlocated: composed.unlocated, dropped: [] } };
  }
  const located = locateTurns(template, render, shape, { tools: options.tools, variables: options.variables }, messages, [...turns.keys()], rendered);
  for (const [index, turn] of turns) {
    const at = located.get(index)!;
    if (at === 'unlocated') out.turns.unlocated.push(index);
    else if (at === 'elsewhere') {
      // The template renders the turn differently once later messages follow (a later user
      // message drops earlier reasoning): the prompt departs from the KV there anyway.
      out.turns.dropped.push(index);
    } else {
      out.cuts.push(at.promptLength);
      out.regions.push({ start: at.promptLength, end: at.bodyEnd, tokens: turn.tokens });
      out.turns.replayed.push(index);
    }
  }
  return out;
}

/** How many tokens tokenize('', addSpecial) puts before the text (a BOS): they spell none of it. */
function leadingSpecial(model: Model, toks: ArrayLike<number>): number {
  const bos = model.tokenize('', { addSpecial: true, parseSpecial: false });
  let n = 0;
  while (n < bos.length && n < toks.length && toks[n] === bos[n]) n++;
  return n;
}

function concatTokens(a: ArrayLike<number>, b: ArrayLike<number>): Int32Array {
  const out = new Int32Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** Splits the text into token regions and text pieces (cut at `cuts` and around protected ranges). */
function segment(text: string, regions: Region[], cuts: number[], prot: Array<[number, number]>): Segment[] {
  const out: Segment[] = [];
  const bounds = new Set<number>(cuts);
  for (const [a, b] of prot) {
    bounds.add(a);
    bounds.add(b);
  }
  const isProtected = (a: number, b: number): boolean => prot.some(([pa, pb]) => a >= pa && b <= pb);
  const pushText = (from: number, to: number): void => {
    if (to <= from) return;
    const points = [...bounds].filter((p) => p > from && p < to).sort((x, y) => x - y);
    let start = from;
    for (const p of [...points, to]) {
      if (p > start) out.push({ kind: 'text', text: text.slice(start, p), parseSpecial: !isProtected(start, p), from: start });
      start = p;
    }
  };
  let pos = 0;
  for (const r of regions) {
    pushText(pos, r.start);
    out.push({ kind: 'tokens', tokens: r.tokens, from: r.start, to: r.end });
    pos = r.end;
  }
  pushText(pos, text.length);
  return out;
}
