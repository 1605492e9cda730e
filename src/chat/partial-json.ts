/**
 * A tolerant JSON parser for the arguments of a tool call that is still streaming.
 *
 * It reads as much of a JSON prefix as it can and closes what is open: an unterminated string keeps
 * the characters so far, an object or array keeps its complete members, a key without a value and
 * an unfinished literal (`tru`) are dropped. On text that is not JSON it stops at the first bad
 * character and returns what it had. It never throws, and it is linear in the text's length.
 */

const MISSING: unique symbol = Symbol('missing');
const MAX_DEPTH = 1_000;
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

interface State {
  readonly text: string;
  i: number;
  /** Set at the end of the text or at the first character that cannot be JSON. */
  stopped: boolean;
}

function skipWhitespace(s: State): void {
  const t = s.text;
  let i = s.i;
  while (i < t.length) {
    const c = t.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  s.i = i;
}

function setMember(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

function parseString(s: State): { value: string; closed: boolean } {
  const t = s.text;
  s.i++; // opening quote
  let out = '';
  for (;;) {
    let j = s.i;
    while (j < t.length) {
      const c = t.charCodeAt(j);
      if (c === 0x22 || c === 0x5c) break;
      j++;
    }
    out += t.slice(s.i, j);
    s.i = j;
    if (j >= t.length) {
      s.stopped = true;
      return { value: out, closed: false };
    }
    if (t.charCodeAt(j) === 0x22) {
      s.i = j + 1;
      return { value: out, closed: true };
    }
    // backslash
    const e = t[j + 1];
    if (e === undefined) {
      s.i = t.length;
      s.stopped = true;
      return { value: out, closed: false };
    }
    if (e === 'u') {
      const hex = t.slice(j + 2, j + 6);
      if (hex.length < 4) {
        s.i = t.length;
        s.stopped = true;
        return { value: out, closed: false };
      }
      if (!/^[0-9a-fA-F]{4}$/.test(hex)) {
        s.i = j;
        s.stopped = true;
        return { value: out, closed: false };
      }
      out += String.fromCharCode(parseInt(hex, 16));
      s.i = j + 6;
      continue;
    }
    const mapped = ESCAPES[e];
    if (mapped === undefined) {
      s.i = j;
      s.stopped = true;
      return { value: out, closed: false };
    }
    out += mapped;
    s.i = j + 2;
  }
}

function parseLiteral(s: State, word: string, value: unknown): unknown {
  const t = s.text;
  if (t.startsWith(word, s.i)) {
    s.i += word.length;
    return value;
  }
  s.stopped = true; // either an unfinished literal at the end, or garbage: both end parsing
  return MISSING;
}

function parseValue(s: State, depth: number): unknown {
  skipWhitespace(s);
  const t = s.text;
  if (s.i >= t.length) {
    s.stopped = true;
    return MISSING;
  }
  const c = t[s.i];
  switch (c) {
    case '{':
      return depth >= MAX_DEPTH ? stop(s) : parseObject(s, depth + 1);
    case '[':
      return depth >= MAX_DEPTH ? stop(s) : parseArray(s, depth + 1);
    case '"':
      return parseString(s).value;
    case 't':
      return parseLiteral(s, 'true', true);
    case 'f':
      return parseLiteral(s, 'false', false);
    case 'n':
      return parseLiteral(s, 'null', null);
    default: {
      NUMBER.lastIndex = s.i;
      const m = NUMBER.exec(t);
      if (m === null) return stop(s);
      s.i += m[0].length;
      return Number(m[0]);
    }
  }
}

function stop(s: State): typeof MISSING {
  s.stopped = true;
  return MISSING;
}

function parseObject(s: State, depth: number): Record<string, unknown> {
  const t = s.text;
  const out: Record<string, unknown> = {};
  s.i++; // '{'
  for (;;) {
    skipWhitespace(s);
    if (s.i >= t.length) {
      s.stopped = true;
      return out;
    }
    const c = t[s.i];
    if (c === '}') {
      s.i++;
      return out;
    }
    if (c === ',') {
      s.i++;
      continue;
    }
    if (c !== '"') {
      s.stopped = true;
      return out;
    }
    const key = parseString(s);
    if (!key.closed) return out;
    skipWhitespace(s);
    if (t[s.i] !== ':') {
      s.stopped = true;
      return out;
    }
    s.i++;
    const value = parseValue(s, depth);
    if (value !== MISSING) setMember(out, key.value, value);
    if (s.stopped) return out;
  }
}

function parseArray(s: State, depth: number): unknown[] {
  const t = s.text;
  const out: unknown[] = [];
  s.i++; // '['
  for (;;) {
    skipWhitespace(s);
    if (s.i >= t.length) {
      s.stopped = true;
      return out;
    }
    const c = t[s.i];
    if (c === ']') {
      s.i++;
      return out;
    }
    if (c === ',') {
      s.i++;
      continue;
    }
    const value = parseValue(s, depth);
    if (value !== MISSING) out.push(value);
    if (s.stopped) return out;
  }
}

/**
 * Parses a (possibly incomplete) JSON text; `undefined` when nothing could be read.
 *
 * @example
 * ```ts
 * parsePartialJson('{"city": "Par'); // { city: 'Par' }
 * parsePartialJson('{"a": [1, 2, tr'); // { a: [1, 2] }
 * ```
 */
export function parsePartialJson(text: string): unknown {
  if (typeof text !== 'string') return undefined;
  try {
    const value = parseValue({ text, i: 0, stopped: false }, 0);
    return value === MISSING ? undefined : value;
  } catch {
    return undefined;
  }
}
