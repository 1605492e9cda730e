// Qwen's XML call syntax (Qwen3-Coder, Qwen3.5, Qwen3.6): the body of a `<tool_call>` span is
// `\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n…</function>\n`.

/** A parameter's JSON Schema type, when the caller knows the tool's schema. */
export type XmlParamTypes = (tool: string, key: string) => string | undefined;

export interface XmlCall {
  name: string;
  arguments: Record<string, unknown>;
}

/** Whether a span body is in the XML call syntax. */
export function isXmlCallBody(text: string): boolean {
  return text.trimStart().startsWith('<function=');
}

const FUNCTION_RE = /<function=([^>\n]+)>\n?([\s\S]*?)<\/function>/g;
const PARAM_RE = /<parameter=([^>\n]+)>\n?([\s\S]*?)\n?<\/parameter>/g;

function typedValue(raw: string, type: string | undefined): unknown {
  if (type === 'string') return raw;
  try {
    const v: unknown = JSON.parse(raw);
    // Without a schema, only a value that is not a plain string reads as JSON.
    return v;
  } catch {
    return raw;
  }
}

/**
 * The calls of an XML span body; undefined when it is not well-formed: text outside the
 * `<function=…>` blocks, a block that never closes, or text between parameters.
 */
export function parseXmlCalls(text: string, types?: XmlParamTypes): XmlCall[] | undefined {
  const out: XmlCall[] = [];
  let last = 0;
  for (const m of text.matchAll(FUNCTION_RE)) {
    if (text.slice(last, m.index).trim() !== '') return undefined;
    last = m.index + m[0].length;
    const name = m[1]!.trim();
    const args: Record<string, unknown> = {};
    let plast = 0;
    const inner = m[2]!;
    for (const p of inner.matchAll(PARAM_RE)) {
      if (inner.slice(plast, p.index).trim() !== '') return undefined;
      plast = p.index + p[0].length;
      const key = p[1]!.trim();
      if (Object.hasOwn(args, key)) return undefined; // a duplicated parameter
      args[key] = typedValue(p[2]!, types?.(name, key));
    }
    if (inner.slice(plast).trim() !== '') return undefined;
    out.push({ name, arguments: args });
  }
  if (out.length === 0 || text.slice(last).trim() !== '') return undefined;
  return out;
}

/** A tolerant parse of a body still streaming: the name once `<function=NAME>` is complete, and the parameters closed so far. */
export function parsePartialXmlCall(text: string, types?: XmlParamTypes): { name: string | null; arguments: Record<string, unknown> | undefined } {
  const f = /<function=([^>\n]+)>/.exec(text);
  if (!f) return { name: null, arguments: undefined };
  const name = f[1]!.trim();
  const args: Record<string, unknown> = {};
  for (const p of text.slice(f.index + f[0].length).matchAll(PARAM_RE)) args[p[1]!.trim()] = typedValue(p[2]!, types?.(name, p[1]!.trim()));
  return { name, arguments: args };
}

// Harmony (gpt-oss): a span runs from ` to=functions.` to `<|call|>`; its body is
// `NAME<|channel|>commentary json<|message|>{…}` or `NAME <|constrain|>json<|message|>{…}`.

/** Whether a span body is a Harmony call (a name, a header, `<|message|>`, then the arguments). */
export function isHarmonyCallBody(text: string): boolean {
  return /^[^\s<{[]+[\s\S]*?<\|message\|>/.test(text);
}

/** The name and arguments text of a Harmony body (the arguments undefined before `<|message|>`). */
export function splitHarmonyCall(text: string): { name: string; args: string | undefined } {
  const name = /^[^\s<]+/.exec(text)?.[0] ?? '';
  const at = text.indexOf('<|message|>');
  return { name, args: at < 0 ? undefined : text.slice(at + '<|message|>'.length) };
}

// DeepSeek V3.1+: a span runs from `<｜tool▁call▁begin｜>` to `<｜tool▁call▁end｜>`; its body is
// `NAME<｜tool▁sep｜>{…}`.
export const DEEPSEEK_SEP = '<｜tool▁sep｜>';

export function isDeepSeekCallBody(text: string): boolean {
  return /^[^\s<{[]+<｜tool▁sep｜>/.test(text);
}

export function splitDeepSeekCall(text: string): { name: string; args: string | undefined } {
  const at = text.indexOf(DEEPSEEK_SEP);
  if (at < 0) return { name: /^[^\s<]+/.exec(text)?.[0] ?? '', args: undefined };
  return { name: text.slice(0, at), args: text.slice(at + DEEPSEEK_SEP.length) };
}

// Gemma 4 native: a span runs from `<|tool_call>` to `<tool_call|>`; its body is
// `call:NAME{key:value,…}`: bare keys, strings between `<|"|>` quotes, numbers, booleans,
// nested `{…}` (keys bare) and `[…]`.
export function isGemmaCallBody(text: string): boolean {
  return text.startsWith('call:');
}

const GQ = '<|"|>';

/** Gemma 4's argument syntax as JSON text (undefined when malformed). */
export function gemmaArgsToJson(src: string): string | undefined {
  let out = '';
  let i = 0;
  let expectKey = false;
  const stack: string[] = [];
  while (i < src.length) {
    if (src.startsWith(GQ, i)) {
      const end = src.indexOf(GQ, i + GQ.length);
      if (end < 0) return undefined;
      out += JSON.stringify(src.slice(i + GQ.length, end));
      i = end + GQ.length;
      expectKey = false;
      continue;
    }
    const c = src[i]!;
    if (c === '{') {
      stack.push('}');
      out += c;
      expectKey = true;
      i++;
    } else if (c === '[') {
      stack.push(']');
      out += c;
      expectKey = false;
      i++;
    } else if (c === '}' || c === ']') {
      if (stack.pop() !== c) return undefined;
      out += c;
      i++;
    } else if (c === ',') {
      out += c;
      expectKey = stack[stack.length - 1] === '}';
      i++;
    } else if (c === ':') {
      out += c;
      i++;
    } else if (expectKey) {
      const m = /^[A-Za-z0-9_.$-]+/.exec(src.slice(i));
      if (!m) return undefined;
      out += JSON.stringify(m[0]);
      i += m[0].length;
      expectKey = false;
    } else {
      const m = /^[^,:{}[\]]+/.exec(src.slice(i));
      if (!m) return undefined;
      out += m[0];
      i += m[0].length;
    }
  }
  return stack.length === 0 ? out : undefined;
}

/** The name and arguments (as JSON text) of a Gemma 4 body. */
export function splitGemmaCall(text: string): { name: string; args: string | undefined } {
  const m = /^call:([^{\s]+)/.exec(text);
  const name = m?.[1] ?? '';
  const rest = m ? text.slice(m[0].length) : '';
  return { name, args: rest.startsWith('{') ? gemmaArgsToJson(rest.trimEnd()) : undefined };
}
