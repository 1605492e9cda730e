// Tool-call spans (the exact text between the markers) to calls, and tool-call ids.
import { randomBytes } from 'node:crypto';
import { ToolCallAccumulator } from './accumulator.js';
import {
  isDeepSeekCallBody,
  isGemmaCallBody,
  isHarmonyCallBody,
  isXmlCallBody,
  parseXmlCalls,
  splitDeepSeekCall,
  splitGemmaCall,
  splitHarmonyCall,
  type XmlParamTypes,
} from './xml-calls.js';
import { parseJsonBounded } from '../json-limits.js';

/** Parameter types from tool schemas (`properties[key].type`), for the XML call syntax. */
export function xmlParamTypes(tools: ReadonlyArray<{ name: string; parameters?: unknown }>): XmlParamTypes {
  const byName = new Map(tools.map((t) => [t.name, t.parameters]));
  return (tool, key) => {
    const p = byName.get(tool) as { properties?: Record<string, { type?: unknown }> } | undefined;
    const t = p?.properties?.[key]?.type;
    return typeof t === 'string' ? t : undefined;
  };
}

/** A call parsed from one span. */
export interface SpanToolCall {
  name: string;
  /** Decoded arguments; `{}` when they were malformed. */
  arguments: Record<string, unknown>;
  /** The raw span text when it was not a well-formed call (the runner answers such calls with an error). */
  invalidArguments?: string;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Parses a span's text into calls. A Hermes/Qwen body `{"name": …, "arguments": …}` (or
 * `"parameters"`, or arguments as a JSON string) is one call, read with the tool accumulator; a
 * JSON array of such bodies (Mistral's `[TOOL_CALLS][…]`) is several calls sharing the span.
 * Anything else is one call flagged `invalidArguments`.
 */
export function parseToolCallSpan(text: string, types?: XmlParamTypes): SpanToolCall[] {
  const trimmed = text.trim();
  // Qwen's XML syntax: `<function=NAME>` blocks with `<parameter=KEY>` values (typed by the
  // tool's schema when `types` knows it: strings raw, anything else JSON).
  if (isXmlCallBody(trimmed)) {
    const calls = parseXmlCalls(trimmed, types);
    if (!calls) {
      const name = /<function=([^>\n]+)>/.exec(trimmed)?.[1]?.trim() ?? '';
      return [{ name, arguments: {}, invalidArguments: text }];
    }
    return calls.map((c) => ({ name: c.name, arguments: c.arguments }));
  }
  // Harmony (gpt-oss): `NAME<|channel|>commentary json<|message|>{…}`.
  if (isHarmonyCallBody(text) || isDeepSeekCallBody(text) || isGemmaCallBody(text)) {
    const h = isGemmaCallBody(text) ? splitGemmaCall(text) : isDeepSeekCallBody(text) ? splitDeepSeekCall(text) : splitHarmonyCall(text);
    const args = h.args === undefined ? undefined : argumentsObject(h.args);
    if (!args || h.name === '') return [{ name: h.name, arguments: {}, invalidArguments: text }];
    return [{ name: h.name, arguments: args }];
  }
  if (trimmed.startsWith('[')) {
    try {
      const list: unknown = JSON.parse(trimmed);
      if (Array.isArray(list) && list.length > 0 && list.every((c) => isRecord(c) && typeof c.name === 'string')) {
        return list.map((c) => parseToolCallSpan(JSON.stringify(c))[0]!);
      }
    } catch {
      // fall through: not an array of calls
    }
  }
  const acc = new ToolCallAccumulator();
  acc.feed({ type: 'toolCallEnd', index: 0, text });
  const call = acc.finalize()[0];
  if (!call) return [{ name: '', arguments: {}, invalidArguments: text }];
  const out: SpanToolCall = { name: call.name, arguments: call.arguments };
  if (call._invalid_arguments !== undefined) out.invalidArguments = call._invalid_arguments;
  return [out];
}

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';

/**
 * A new tool-call id: `prefix`, the time in milliseconds (base 36, so ids sort by creation), and
 * 80 random bits. Unique across processes and restarts without any coordination.
 */
export function newToolCallId(prefix = 'call_'): string {
  const bytes = randomBytes(14);
  let rand = '';
  for (const b of bytes) rand += ALPHABET[b % 62];
  return `${prefix}${Date.now().toString(36)}${rand}`;
}

/** JSON with object keys sorted at every level: equal for equal values whatever the key order or spacing. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (isRecord(value)) {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** Decodes tool-call arguments given as JSON text or an object; undefined when they are not a JSON object. */
export function argumentsObject(args: Record<string, unknown> | string): Record<string, unknown> | undefined {
  if (typeof args !== 'string') return args;
  if (args.trim() === '') return {};
  try {
    const v: unknown = parseJsonBounded(args);
    return isRecord(v) ? v : undefined;
  } catch {
    return undefined;
  }
}
