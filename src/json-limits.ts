// A bound on how deep client JSON may nest. Code that walks a parsed value recursively (canonical
// JSON, templates, schema checks) would overflow the stack on a value nested thousands deep, so
// deep JSON is refused where it enters: the HTTP body, and every tool-call arguments string.

/** Deepest nesting of arrays and objects accepted in client JSON. */
export const MAX_JSON_DEPTH = 256;

/** The deepest nesting of `[`/`{` in JSON text (outside strings), stopping once past `limit`. */
export function jsonTextDepth(text: string, limit = MAX_JSON_DEPTH): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) {
        max = depth;
        if (max > limit) return max;
      }
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return max;
}

export class JsonTooDeepError extends Error {
  constructor(readonly limit: number) {
    super(`JSON nested deeper than ${limit} levels`);
    this.name = 'JsonTooDeepError';
  }
}

/** JSON.parse, refusing text nested deeper than `limit` (JsonTooDeepError) before parsing it. */
export function parseJsonBounded(text: string, limit = MAX_JSON_DEPTH): unknown {
  if (jsonTextDepth(text, limit) > limit) throw new JsonTooDeepError(limit);
  return JSON.parse(text) as unknown;
}
