// Per-request tool-call grammars: the span between the tool-call markers, in the model
// family's call syntax, naming one of the tools, with arguments matching that tool's schema.
// Compiled grammars are cached per (tools, choice, family, markers, parallel).
import { LlamuxError } from '../errors.js';
import { RuleSet, gbnfLiteral, gbnfToken } from './gbnf.js';
import { SchemaConverter, SchemaGrammarError } from './json-schema.js';
import { defineGemmaValue, gemmaValue } from './gemma-values.js';

/** A tool the model may call: its name and the JSON Schema of its arguments (an object schema). */
export interface ToolDefinition {
  readonly name: string;
  readonly description?: string;
  /** JSON Schema of the arguments object; absent: the call takes no arguments (`{}`); `true`: any object. */
  readonly parameters?: Readonly<Record<string, unknown>> | boolean;
}

/** `auto`: free text until the model opens a span; `required`: a call first; `{ name }`: a call of that tool first; `none`: no span detection. */
export type ToolChoice = 'auto' | 'none' | 'required' | { readonly name: string };

/**
 * Call syntax inside a span. `hermes` / `gemma4` / `json`: `{"name": …, "arguments": {…}}`;
 * `llama3`: `{"name": …, "parameters": {…}}`; `mistral`: a JSON list of `{"name", "arguments"}` calls.
 */
export type ToolCallFamily = 'hermes' | 'llama3' | 'mistral' | 'gemma4' | 'json' | 'qwen-xml' | 'harmony' | 'deepseek' | 'gemma4-native';

export interface ToolGrammarRequest {
  readonly tools: readonly ToolDefinition[];
  readonly choice: Exclude<ToolChoice, 'none'>;
  readonly family: ToolCallFamily;
  /** Start marker tokens (the grammar matches these ids exactly). */
  readonly start: readonly number[];
  /** End marker tokens; when `endIsEog`, the grammar ends before it and the engine allows only that token. */
  readonly end: readonly number[];
  readonly endIsEog: boolean;
  /** false: a span holds one call (Mistral's list gets one element). */
  readonly parallel: boolean;
  /** Control tokens of the call syntax (Harmony's `<|channel|>`, `<|constrain|>`, `<|message|>`) by text: the grammar matches these ids, not their spelling. */
  readonly specialTokens?: Readonly<Record<string, number>>;
  /** A caller's GBNF for the span body (rule `root`); replaces the family syntax and the tools' schemas. */
  readonly body?: string;
}

export interface ToolGrammar {
  /** GBNF; its root rule is `root` (below). */
  readonly gbnf: string;
  readonly root: string;
  /** Schema keywords the grammar accepts without enforcing, as `tool: path: keyword` (empty when exact). */
  readonly relaxed: readonly string[];
}

export const TOOL_GRAMMAR_ROOT = 'llamux-tool-span';

const CACHE_LIMIT = 64;
const cache = new Map<string, ToolGrammar>();
const warned = new Set<string>();

/** Empties the compiled-grammar cache (benchmarks). */
export function clearToolGrammarCache(): void {
  cache.clear();
}

function invalid(message: string): LlamuxError {
  return new LlamuxError('INVALID_ARGUMENT', message);
}

function argsKey(family: ToolCallFamily): string {
  return family === 'llama3' ? 'parameters' : 'arguments';
}

function compile(req: ToolGrammarRequest): ToolGrammar {
  const rules = new RuleSet();
  rules.name(TOOL_GRAMMAR_ROOT); // reserved first: printed first
  const start = req.start.map(gbnfToken).join(' ');
  const end = req.endIsEog ? '' : ` ${req.end.map(gbnfToken).join(' ')}`;
  if (req.body !== undefined) {
    if (typeof req.choice === 'object') throw invalid('A named toolChoice needs tools: with toolCallGrammar the body grammar decides the names');
    // The caller's rules go in as written; ours are named so they do not clash.
    rules.define(TOOL_GRAMMAR_ROOT, `${start} root${end}`);
    return { gbnf: `${rules.toString()}${req.body}\n`, root: TOOL_GRAMMAR_ROOT, relaxed: [] };
  }
  const names = new Set<string>();
  for (const t of req.tools) {
    if (names.has(t.name)) throw invalid(`Tool name "${t.name}" is given twice`);
    names.add(t.name);
  }
  let tools = req.tools;
  if (typeof req.choice === 'object') {
    const wanted = req.choice.name;
    tools = req.tools.filter((t) => t.name === wanted);
    if (tools.length === 0) throw invalid(`toolChoice names "${wanted}", which is not one of the tools (${[...names].map((n) => `"${n}"`).join(', ')})`);
  }
  if (tools.length === 0) throw invalid(`toolChoice "${String(req.choice)}" needs at least one tool`);
  const relaxed: string[] = [];
  const calls: string[] = [];
  for (const [i, tool] of tools.entries()) {
    const params = tool.parameters ?? { type: 'object', properties: {}, additionalProperties: false };
    const conv = new SchemaConverter(rules, params);
    let args: string | undefined;
    try {
      if (typeof params === 'object' && params.type !== undefined && params.type !== 'object') {
        throw new SchemaGrammarError('', `the arguments schema must describe an object, not ${JSON.stringify(params.type)}`);
      }
      // `true`: any arguments object (the tool layer's "no schema").
      if (params === true) args = conv.prim('json-object');
      else args = conv.convert(typeof params === 'object' && params.type === undefined ? { ...params, type: 'object' } : params, '', `t${i}-args`);
      if (args === undefined) throw new SchemaGrammarError('', 'the schema allows no value');
    } catch (e) {
      if (e instanceof SchemaGrammarError) {
        throw invalid(`Tool "${tool.name}": the parameters schema${e.path ? ` at ${e.path}` : ''} cannot be compiled to a grammar: ${e.message}`);
      }
      throw e;
    }
    for (const r of conv.relaxed) relaxed.push(`${tool.name}: ${r}`);
    if (req.family === 'qwen-xml') {
      calls.push(xmlCall(rules, conv, tool, params, i, relaxed));
      continue;
    }
    if (req.family === 'deepseek') {
      // NAME<｜tool▁sep｜>{…}
      const sep = req.specialTokens?.['<｜tool▁sep｜>'];
      calls.push(rules.add(`t${i}-call`, `${gbnfLiteral(tool.name)} ${sep === undefined ? gbnfLiteral('<｜tool▁sep｜>') : gbnfToken(sep)} ${args}`));
      continue;
    }
    if (req.family === 'gemma4-native') {
      // call:NAME{…} in Gemma's own argument syntax, keys and values following the schema.
      defineGemmaValue(rules, req.specialTokens?.['<|"|>']);
      const gemmaRelaxed: string[] = [];
      const gemmaArgs = params === true ? 'gemma-object' : gemmaValue(rules, typeof params === 'object' && params.type === undefined ? { ...params, type: 'object' } : params, '', `t${i}-gemma`, gemmaRelaxed);
      for (const r of new Set(gemmaRelaxed)) relaxed.push(`${tool.name}: ${r}`);
      calls.push(rules.add(`t${i}-call`, `${gbnfLiteral(`call:${tool.name}`)} ${gemmaArgs}`));
      continue;
    }
    if (req.family === 'harmony') {
      // After ` to=functions.`: the name, the channel header in either order gpt-oss writes, the JSON arguments.
      const sp = (text: string): string => {
        const id = req.specialTokens?.[text];
        return id === undefined ? gbnfLiteral(text) : gbnfToken(id);
      };
      const header = rules.add(
        'harmony-header',
        `(${sp('<|channel|>')} ${gbnfLiteral('commentary json')} ${sp('<|message|>')} | ${gbnfLiteral(' ')} ${sp('<|constrain|>')} ${gbnfLiteral('json')} ${sp('<|message|>')})`,
      );
      calls.push(rules.add(`t${i}-call`, `${gbnfLiteral(tool.name)} ${header} ${args}`));
      continue;
    }
    conv.prim('sp');
    calls.push(rules.add(`t${i}-call`, `${gbnfLiteral(`"name"`)} ":" sp ${gbnfLiteral(JSON.stringify(tool.name))} "," sp ${gbnfLiteral(`"${argsKey(req.family)}"`)} ":" sp ${args}`));
  }
  if (req.family === 'harmony' || req.family === 'deepseek' || req.family === 'gemma4-native') {
    rules.define(TOOL_GRAMMAR_ROOT, `${start} (${calls.join(' | ')})${end}`);
    return { gbnf: rules.toString(), root: TOOL_GRAMMAR_ROOT, relaxed };
  }
  if (req.family === 'qwen-xml') {
    // <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n…</function>\n</tool_call>
    // One function per span, as Qwen's templates render each call of a turn in its own
    // <tool_call> block: parallel calls are more spans, never more functions inside one (a
    // grammar that allowed those would let a model repeat calls instead of closing the span).
    const one = rules.add('xml-call', `${gbnfLiteral('\n<function=')} (${calls.join(' | ')}) ${gbnfLiteral('</function>\n')}`);
    rules.define(TOOL_GRAMMAR_ROOT, `${start} ${one}${end}`);
    return { gbnf: rules.toString(), root: TOOL_GRAMMAR_ROOT, relaxed };
  }
  const call = rules.add('call', `"{" sp (${calls.join(' | ')}) sp "}"`);
  let body: string;
  if (req.family === 'mistral') body = req.parallel ? `"[" sp ${call} ("," sp ${call})* sp "]"` : `"[" sp ${call} sp "]"`;
  else if (req.family === 'llama3') body = call;
  else body = `[ \\n]? ${call} [ \\n]?`;
  rules.define(TOOL_GRAMMAR_ROOT, `${start} ${body}${end}`);
  return { gbnf: rules.toString(), root: TOOL_GRAMMAR_ROOT, relaxed };
}

/**
 * One tool in Qwen's XML call syntax: `NAME>\n` then its parameters in the schema's order
 * (required ones always, optional ones maybe). A string parameter is raw text up to
 * `\n</parameter>` (no `</` inside); any other type is JSON matching its schema.
 */
function xmlCall(rules: RuleSet, conv: SchemaConverter, tool: ToolDefinition, params: unknown, i: number, relaxed: string[]): string {
  const schema = (typeof params === 'object' && params !== null ? params : {}) as Record<string, unknown>;
  const props = (typeof schema.properties === 'object' && schema.properties !== null ? schema.properties : {}) as Record<string, unknown>;
  const required = new Set(Array.isArray(schema.required) ? (schema.required as string[]) : []);
  if (params === true || schema.additionalProperties === true) relaxed.push(`${tool.name}: additionalProperties (the XML call syntax names only declared parameters)`);
  rules.define('xml-text', '([^<] | "<" [^/])*');
  const parts: string[] = [];
  for (const [j, [key, sub]] of Object.entries(props).entries()) {
    const s = sub as Record<string, unknown> | boolean;
    const isString = typeof s === 'object' && s !== null && s.type === 'string' && s.enum === undefined && s.const === undefined && s.pattern === undefined && s.format === undefined;
    // A string enum (or const) is written raw too, as the template renders it: one of the literals.
    const raw = typeof s === 'object' && s !== null && s.type === 'string' ? (s.enum ?? (s.const !== undefined ? [s.const] : undefined)) : undefined;
    let value: string | undefined;
    if (isString) value = 'xml-text';
    else if (Array.isArray(raw) && raw.length > 0 && raw.every((v) => typeof v === 'string' && !v.includes('</'))) {
      value = rules.add(`t${i}-p${j}-enum`, (raw as string[]).map((v) => gbnfLiteral(v)).join(' | '));
    } else {
      try {
        value = conv.convert(s, `/properties/${key}`, `t${i}-p${j}`);
      } catch (e) {
        if (e instanceof SchemaGrammarError) throw invalid(`Tool "${tool.name}": the parameters schema at ${e.path || `/properties/${key}`} cannot be compiled to a grammar: ${e.message}`);
        throw e;
      }
    }
    if (value === undefined) throw invalid(`Tool "${tool.name}": parameter "${key}" allows no value`);
    const p = rules.add(`t${i}-p${j}`, `${gbnfLiteral(`<parameter=${key}>\n`)} ${value} ${gbnfLiteral('\n</parameter>\n')}`);
    parts.push(required.has(key) ? p : `${p}?`);
  }
  return rules.add(`t${i}-call`, `${gbnfLiteral(`${tool.name}>\n`)} ${parts.join(' ')}`);
}

const checked = new Map<string, string | null>();

/**
 * Checks that every tool's arguments schema compiles to a grammar (satisfiable, no ambiguity past
 * MAX_AMBIGUITY, local $refs that resolve), without building the span grammar. The server calls it
 * while it reads a request, so a hostile schema is refused before any other work.
 * @throws LlamuxError INVALID_ARGUMENT naming the tool and the JSON pointer
 */
export function checkToolSchemas(tools: readonly ToolDefinition[]): void {
  for (const tool of tools) {
    const params = tool.parameters ?? { type: 'object', properties: {}, additionalProperties: false };
    let key: string;
    try {
      key = JSON.stringify(params);
    } catch {
      throw invalid(`Tool "${tool.name}": the parameters schema cannot be serialised`);
    }
    let problem = checked.get(key);
    if (problem === undefined) {
      problem = null;
      if (params !== true) {
        try {
          const conv = new SchemaConverter(new RuleSet(), params);
          if (typeof params === 'object' && params.type !== undefined && params.type !== 'object') {
            throw new SchemaGrammarError('', `the arguments schema must describe an object, not ${JSON.stringify(params.type)}`);
          }
          if (conv.convert(typeof params === 'object' && params.type === undefined ? { ...params, type: 'object' } : params, '', 'check') === undefined) {
            throw new SchemaGrammarError('', 'the schema allows no value');
          }
        } catch (e) {
          if (!(e instanceof SchemaGrammarError)) throw e;
          problem = `the parameters schema${e.path ? ` at ${e.path}` : ''} cannot be compiled to a grammar: ${e.message}`;
        }
      }
      checked.set(key, problem);
      if (checked.size > CACHE_LIMIT * 4) checked.delete(checked.keys().next().value!);
    }
    if (problem !== null) throw invalid(`Tool "${tool.name}": ${problem}`);
  }
}

/**
 * The grammar of a tool-call span for these tools and this choice. Cached: the same request
 * shape returns the same object.
 * @throws LlamuxError INVALID_ARGUMENT: duplicate tool names, a named choice that is not a tool,
 * `required` without tools, or a schema no value can satisfy (named by tool and JSON pointer)
 */
export function compileToolGrammar(req: ToolGrammarRequest): ToolGrammar {
  const key = JSON.stringify([req.tools.map((t) => [t.name, t.parameters ?? null]), req.choice, req.family, req.start, req.end, req.endIsEog, req.parallel, req.body ?? null, req.specialTokens ?? null]);
  const hit = cache.get(key);
  if (hit) {
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  const g = compile(req);
  // Never silently: what the grammar does not enforce is said once per process and list.
  const said = g.relaxed.join('; ');
  if (said && !warned.has(said)) {
    if (warned.size < 1024) warned.add(said);
    process.emitWarning(`Tool grammar: schema keywords not enforced by the grammar (calls are still JSON of the right shape): ${said}`, {
      code: 'LLAMUX_TOOL_SCHEMA_RELAXED',
    });
  }
  cache.set(key, g);
  if (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value!);
  return g;
}
