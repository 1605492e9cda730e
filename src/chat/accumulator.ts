/**
 * Reassembles streamed tool-call fragments into complete calls.
 *
 * Recognised fragment shapes (anything else is dropped silently):
 * - OpenAI-compatible: an array of partial calls (or one partial call)
 *   `{ index, id?, type?, function?: { name?, arguments? } }`; `arguments` pieces are concatenated.
 * - Anthropic, normalised: `{ _index, _phase: 'start', id, name }`,
 *   `{ _index, _phase: 'partial', partial_json }`, `{ _index, _phase: 'stop' }`;
 *   and the raw stream events `content_block_start` (a `tool_use` block) and `content_block_delta`
 *   (an `input_json_delta`).
 * - Gemini: complete calls `{ name, arguments: {…} }` or `{ functionCall: { name, args, id? } }`.
 * - llamux engine events: `{ type: 'toolCallDelta', index, text }` and
 *   `{ type: 'toolCallEnd', index, text, tokens, truncated? }`, whose text is a Hermes/Qwen-style
 *   body `{"name": "…", "arguments": {…}}` (`"parameters"` is accepted for `"arguments"`, and
 *   arguments given as a JSON string are decoded).
 *
 * Fragments are stored as string pieces and joined once, in `finalize()`, so the total work is
 * linear in the bytes fed.
 */
import { parsePartialJson } from './partial-json.js';
import {
  isDeepSeekCallBody,
  isGemmaCallBody,
  isHarmonyCallBody,
  isXmlCallBody,
  parsePartialXmlCall,
  parseXmlCalls,
  splitDeepSeekCall,
  splitGemmaCall,
  splitHarmonyCall,
} from './xml-calls.js';

/** Name + arguments text of a body in one of the non-JSON call syntaxes (XML excluded). */
function splitNamed(text: string): { name: string; args: string | undefined } | undefined {
  if (isGemmaCallBody(text)) return splitGemmaCall(text);
  if (isDeepSeekCallBody(text)) return splitDeepSeekCall(text);
  if (isHarmonyCallBody(text)) return splitHarmonyCall(text);
  return undefined;
}

export type ToolCallSource = 'openai' | 'anthropic' | 'gemini' | 'llamux';

/** A reassembled call, in the shape `runToolCalls` accepts once `id` is a string. */
export interface AccumulatedToolCall {
  /** The provider's id; `null` when it sent none (Gemini, llamux) and no `idFactory` was given. */
  readonly id: string | null;
  /** `''` when no name arrived. */
  readonly name: string;
  /** The decoded arguments; `{}` when they were malformed. */
  readonly arguments: Record<string, unknown>;
  /** The raw text, present when the arguments were not a JSON object (the runner refuses such calls). */
  readonly _invalid_arguments?: string;
  /** Present on a llamux call cut off by the generation limit, or one that never got its end event. */
  readonly _truncated?: true;
}

/** A call as it looks mid-stream. */
export interface ToolCallSnapshot {
  readonly source: ToolCallSource;
  readonly id: string | null;
  readonly name: string | null;
  /** A tolerant parse of the arguments so far; `undefined` before anything object-like arrived. */
  readonly arguments: Record<string, unknown> | undefined;
  /** True once the provider marked the call finished (Anthropic stop, llamux end; Gemini always). */
  readonly complete: boolean;
}

export interface ToolCallAccumulatorOptions {
  /** Mints an id for a call that arrived without one; `position` is its place in `finalize()`'s list. */
  readonly idFactory?: (source: ToolCallSource, position: number) => string;
}

interface Pending {
  id: string | null;
  name: string | null;
  chunks: string[];
  /** Arguments that arrived already decoded (OpenAI-compatible servers, Anthropic start `input`). */
  object: Record<string, unknown> | undefined;
  complete: boolean;
  /** Bumped on every change; snapshots are cached per version. */
  version: number;
  snapshot?: { version: number; value: Record<string, unknown> | undefined };
}

interface LlamuxPending {
  deltas: string[];
  end: string | undefined;
  truncated: boolean;
  version: number;
  snapshot?: { version: number; name: string | null; value: Record<string, unknown> | undefined };
}

type Decoded = { ok: true; value: Record<string, unknown> } | { ok: false };

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isIndex(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/** Decodes an arguments string: blank is `{}`, anything but a JSON object is refused. */
export function decodeToolArguments(raw: string): Decoded {
  if (raw.trim() === '') return { ok: true, value: {} };
  try {
    const value: unknown = JSON.parse(raw);
    return isRecord(value) ? { ok: true, value } : { ok: false };
  } catch {
    return { ok: false };
  }
}

function newPending(): Pending {
  return { id: null, name: null, chunks: [], object: undefined, complete: false, version: 0 };
}

function take<K>(map: Map<K, Pending>, key: K): Pending {
  let entry = map.get(key);
  if (entry === undefined) {
    entry = newPending();
    map.set(key, entry);
  }
  return entry;
}

function sortedValues<V>(map: Map<number, V>): V[] {
  return [...map.entries()].sort((a, b) => a[0] - b[0]).map((e) => e[1]);
}

/**
 * @example
 * ```ts
 * const acc = new ToolCallAccumulator();
 * for await (const chunk of stream) for (const d of chunk.choices[0].delta.tool_calls ?? []) acc.feed([d]);
 * const calls = acc.finalize(); // [{ id, name, arguments }]
 * ```
 */
export class ToolCallAccumulator {
  readonly #openai = new Map<number, Pending>();
  readonly #anthropic = new Map<number, Pending>();
  readonly #gemini: { id: string | null; name: string; arguments: Record<string, unknown> }[] = [];
  readonly #llamux = new Map<number, LlamuxPending>();
  readonly #idFactory: ToolCallAccumulatorOptions['idFactory'];

  constructor(options: ToolCallAccumulatorOptions = {}) {
    this.#idFactory = typeof options?.idFactory === 'function' ? options.idFactory : undefined;
  }

  /** Feeds one fragment. Never throws; unrecognised fragments are dropped. */
  feed(fragment: unknown): this {
    try {
      this.#feed(fragment);
    } catch {
      // exotic input (throwing getters, revoked proxies) is dropped like any unrecognised fragment
    }
    return this;
  }

  #feed(fragment: unknown): void {
    if (Array.isArray(fragment)) {
      for (const part of fragment) if (isRecord(part)) this.#feedOpenAI(part);
      return;
    }
    if (!isRecord(fragment)) return;
    const f = fragment;
    if (f.type === 'toolCallDelta' || f.type === 'toolCallEnd') {
      this.#feedLlamux(f);
    } else if (typeof f._phase === 'string' && isIndex(f._index)) {
      this.#feedAnthropic(f);
    } else if (f.type === 'content_block_start' || f.type === 'content_block_delta') {
      this.#feedAnthropicEvent(f);
    } else if (isIndex(f.index) && (isRecord(f.function) || typeof f.id === 'string')) {
      this.#feedOpenAI(f);
    } else if (typeof f.name === 'string' && isRecord(f.arguments)) {
      this.#gemini.push({ id: typeof f.id === 'string' ? f.id : null, name: f.name, arguments: f.arguments });
    } else if (isRecord(f.functionCall) && typeof f.functionCall.name === 'string') {
      const fc = f.functionCall;
      const args = fc.args === undefined ? {} : fc.args;
      if (isRecord(args)) this.#gemini.push({ id: typeof fc.id === 'string' ? fc.id : null, name: fc.name as string, arguments: args });
    }
  }

  #feedOpenAI(part: Record<string, unknown>): void {
    if (!isIndex(part.index)) return;
    const fn = part.function;
    if (fn !== undefined && !isRecord(fn)) return;
    if (fn === undefined && typeof part.id !== 'string') return;
    const entry = take(this.#openai, part.index);
    if (typeof part.id === 'string' && part.id !== '' && entry.id === null) entry.id = part.id;
    if (fn === undefined) return;
    if (typeof fn.name === 'string' && fn.name !== '' && entry.name === null) entry.name = fn.name;
    if (typeof fn.arguments === 'string') {
      if (fn.arguments !== '') entry.chunks.push(fn.arguments);
    } else if (isRecord(fn.arguments)) {
      entry.object = fn.arguments;
    }
    entry.version++;
  }

  #feedAnthropic(f: Record<string, unknown>): void {
    const index = f._index as number;
    switch (f._phase) {
      case 'start': {
        const entry = take(this.#anthropic, index);
        if (typeof f.id === 'string' && entry.id === null) entry.id = f.id;
        if (typeof f.name === 'string' && entry.name === null) entry.name = f.name;
        if (isRecord(f.input)) entry.object = f.input;
        entry.version++;
        return;
      }
      case 'partial':
        if (typeof f.partial_json === 'string') {
          const entry = take(this.#anthropic, index);
          if (f.partial_json !== '') entry.chunks.push(f.partial_json);
          entry.version++;
        }
        return;
      case 'stop': {
        const entry = this.#anthropic.get(index);
        if (entry !== undefined) entry.complete = true;
        return;
      }
      default:
        return;
    }
  }

  #feedAnthropicEvent(f: Record<string, unknown>): void {
    if (!isIndex(f.index)) return;
    if (f.type === 'content_block_start') {
      const block = f.content_block;
      if (!isRecord(block) || block.type !== 'tool_use') return;
      this.#feedAnthropic({ _index: f.index, _phase: 'start', id: block.id, name: block.name, input: block.input });
    } else {
      const delta = f.delta;
      if (!isRecord(delta) || delta.type !== 'input_json_delta') return;
      this.#feedAnthropic({ _index: f.index, _phase: 'partial', partial_json: delta.partial_json });
    }
  }

  #feedLlamux(f: Record<string, unknown>): void {
    if (!isIndex(f.index) || typeof f.text !== 'string') return;
    let entry = this.#llamux.get(f.index);
    if (entry === undefined) {
      entry = { deltas: [], end: undefined, truncated: false, version: 0 };
      this.#llamux.set(f.index, entry);
    }
    if (f.type === 'toolCallDelta') {
      if (f.text !== '') entry.deltas.push(f.text);
    } else {
      entry.end = f.text;
      entry.truncated = f.truncated === true;
    }
    entry.version++;
  }

  /** How many calls have been seen so far. */
  get size(): number {
    return this.#openai.size + this.#anthropic.size + this.#gemini.length + this.#llamux.size;
  }

  /**
   * The calls: OpenAI by index, then Anthropic by index, then Gemini in arrival order, then llamux
   * by index. Malformed arguments give `arguments: {}` plus `_invalid_arguments` with the raw text.
   * Never throws; may be called again after more fragments.
   */
  finalize(): AccumulatedToolCall[] {
    const out: AccumulatedToolCall[] = [];
    const mint = (source: ToolCallSource, id: string | null): string | null => {
      if (id !== null || this.#idFactory === undefined) return id;
      try {
        const minted = this.#idFactory(source, out.length);
        return typeof minted === 'string' ? minted : null;
      } catch {
        return null;
      }
    };
    const push = (source: ToolCallSource, entry: Pending): void => {
      const id = mint(source, entry.id);
      const name = entry.name ?? '';
      if (entry.chunks.length === 0) {
        out.push({ id, name, arguments: entry.object ?? {} });
        return;
      }
      const raw = entry.chunks.join('');
      if (entry.chunks.length > 1) entry.chunks = [raw];
      const decoded = decodeToolArguments(raw);
      out.push(decoded.ok ? { id, name, arguments: decoded.value } : { id, name, arguments: {}, _invalid_arguments: raw });
    };
    for (const entry of sortedValues(this.#openai)) push('openai', entry);
    for (const entry of sortedValues(this.#anthropic)) push('anthropic', entry);
    for (const call of this.#gemini) out.push({ id: mint('gemini', call.id), name: call.name, arguments: call.arguments });
    for (const entry of sortedValues(this.#llamux)) out.push(finalizeLlamux(entry, mint('llamux', null)));
    return out;
  }

  /**
   * The calls as they stand, with a tolerant parse of partial arguments. Each call is re-parsed only
   * when fragments arrived for it since the last snapshot, at a cost linear in its text, so take
   * snapshots when you need them (per UI frame), not per fragment.
   */
  snapshot(): ToolCallSnapshot[] {
    const out: ToolCallSnapshot[] = [];
    const partial = (source: ToolCallSource, entry: Pending, complete: boolean): void => {
      let cached = entry.snapshot;
      if (cached === undefined || cached.version !== entry.version) {
        let value: Record<string, unknown> | undefined;
        if (entry.chunks.length === 0) {
          value = entry.object;
        } else {
          const raw = entry.chunks.join('');
          entry.chunks = [raw];
          const parsed = parsePartialJson(raw);
          value = isRecord(parsed) ? parsed : undefined;
        }
        cached = { version: entry.version, value };
        entry.snapshot = cached;
      }
      out.push({ source, id: entry.id, name: entry.name, arguments: cached.value, complete });
    };
    for (const entry of sortedValues(this.#openai)) partial('openai', entry, false);
    for (const entry of sortedValues(this.#anthropic)) partial('anthropic', entry, entry.complete);
    for (const call of this.#gemini) out.push({ source: 'gemini', id: call.id, name: call.name, arguments: call.arguments, complete: true });
    for (const entry of sortedValues(this.#llamux)) {
      let cached = entry.snapshot;
      if (cached === undefined || cached.version !== entry.version) {
        let text: string;
        if (entry.end !== undefined) {
          text = entry.end;
        } else {
          text = entry.deltas.join('');
          entry.deltas = text === '' ? [] : [text];
        }
        if (isXmlCallBody(text) || splitNamed(text) !== undefined) {
          const x = isXmlCallBody(text) ? parsePartialXmlCall(text) : harmonyPartial(text);
          cached = { version: entry.version, name: x.name, value: x.arguments };
          entry.snapshot = cached;
          out.push({ source: 'llamux', id: null, name: cached.name, arguments: cached.value, complete: entry.end !== undefined });
          continue;
        }
        const body = parsePartialJson(text);
        const name = isRecord(body) && typeof body.name === 'string' ? body.name : null;
        const args = isRecord(body) ? (body.arguments ?? body.parameters) : undefined;
        const value = isRecord(args) ? args : typeof args === 'string' ? asRecord(parsePartialJson(args)) : undefined;
        cached = { version: entry.version, name, value };
        entry.snapshot = cached;
      }
      out.push({ source: 'llamux', id: null, name: cached.name, arguments: cached.value, complete: entry.end !== undefined });
    }
    return out;
  }
}

function harmonyPartial(text: string): { name: string | null; arguments: Record<string, unknown> | undefined } {
  const h = splitNamed(text) ?? { name: '', args: undefined };
  return { name: h.name || null, arguments: h.args === undefined ? undefined : asRecord(parsePartialJson(h.args)) };
}

function asRecord(value: unknown): Record<string, unknown> | undefined {
  return isRecord(value) ? value : undefined;
}

/**
 * A llamux call: the end event's text wins over the joined deltas. A truncated call (or one with no
 * end event) is kept, flagged `_truncated`, with `_invalid_arguments` holding the raw body, so the
 * runner answers it with an `invalid_arguments` error the model can see instead of running it.
 */
function finalizeLlamux(entry: LlamuxPending, id: string | null): AccumulatedToolCall {
  const raw = entry.end ?? entry.deltas.join('');
  const truncated = entry.end === undefined || entry.truncated;
  const named = splitNamed(raw);
  if (named) {
    const h = named;
    if (truncated) return { id, name: h.name, arguments: {}, _invalid_arguments: raw, _truncated: true };
    const decoded = decodeToolArguments(h.args ?? '');
    if (!decoded.ok || h.args === undefined || h.args.trim() === '') return { id, name: h.name, arguments: {}, _invalid_arguments: raw };
    return { id, name: h.name, arguments: decoded.value };
  }
  if (isXmlCallBody(raw)) {
    const name = parsePartialXmlCall(raw).name ?? '';
    if (truncated) return { id, name, arguments: {}, _invalid_arguments: raw, _truncated: true };
    const calls = parseXmlCalls(raw.trim());
    if (!calls || calls.length !== 1) return { id, name, arguments: {}, _invalid_arguments: raw };
    return { id, name: calls[0]!.name, arguments: calls[0]!.arguments };
  }
  let body: unknown;
  let parsed = false;
  try {
    body = JSON.parse(raw);
    parsed = true;
  } catch {
    body = parsePartialJson(raw);
  }
  const name = isRecord(body) && typeof body.name === 'string' ? body.name : '';
  if (truncated) return { id, name, arguments: {}, _invalid_arguments: raw, _truncated: true };
  if (!parsed || !isRecord(body) || typeof body.name !== 'string') return { id, name, arguments: {}, _invalid_arguments: raw };
  const args = Object.hasOwn(body, 'arguments') ? body.arguments : Object.hasOwn(body, 'parameters') ? body.parameters : {};
  if (isRecord(args)) return { id, name, arguments: args };
  if (typeof args === 'string') {
    const decoded = decodeToolArguments(args);
    if (decoded.ok) return { id, name, arguments: decoded.value };
  }
  return { id, name, arguments: {}, _invalid_arguments: raw };
}

/** Shorthand for `new ToolCallAccumulator(options)`. */
export function createToolCallAccumulator(options?: ToolCallAccumulatorOptions): ToolCallAccumulator {
  return new ToolCallAccumulator(options);
}
