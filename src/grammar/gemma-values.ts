// Gemma 4's native call arguments (`{city:<|"|>Paris<|"|>,days:3}`) as a grammar that follows the
// tool's JSON schema: declared keys in the schema's order (required ones always, optional ones
// maybe), each value of its declared type; string enums and consts as quoted literals. What the
// Gemma syntax cannot check cheaply (patterns, formats, bounds, $ref) falls back to any
// well-formed Gemma value of that type, and is reported in `relaxed` like the JSON compiler's.
import { gbnfLiteral, gbnfToken, type RuleSet } from './gbnf.js';

type Schema = Record<string, unknown>;

const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Keywords the Gemma grammar does not enforce (the value keeps its type). */
const UNCHECKED = ['pattern', 'format', 'minLength', 'maxLength', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf', 'minItems', 'maxItems', 'uniqueItems', 'minProperties', 'maxProperties', 'not', 'if', 'allOf', '$ref', 'patternProperties', 'propertyNames', 'dependentRequired'];

/** Defines the generic Gemma value rules (`gemma-value`, `gemma-object`, …) once per grammar. */
export function defineGemmaValue(rules: RuleSet, quote: number | undefined): void {
  if (rules.has('gemma-object')) return;
  const q = quote === undefined ? gbnfLiteral('<|"|>') : gbnfToken(quote);
  rules.define('gemma-quote', q);
  rules.define('gemma-string', quote === undefined ? `${q} ([^<] | "<" [^|])* ${q}` : `${q} [^<]* ${q}`);
  rules.define('gemma-key', '[A-Za-z0-9_.$-]+');
  rules.define('gemma-int', '"-"? [0-9]+');
  rules.define('gemma-number', '"-"? [0-9]+ ("." [0-9]+)?');
  rules.define('gemma-value', 'gemma-string | gemma-object | gemma-array | gemma-number | "true" | "false" | "null"');
  rules.define('gemma-object', '"{" (gemma-key ":" gemma-value ("," gemma-key ":" gemma-value)*)? "}"');
  rules.define('gemma-array', '"[" (gemma-value ("," gemma-value)*)? "]"');
}

/** One literal value (an enum member or const) in Gemma syntax. */
function literal(v: unknown): string | undefined {
  if (typeof v === 'string') return v.includes('<') ? undefined : `gemma-quote ${gbnfLiteral(v)} gemma-quote`;
  if (typeof v === 'number' && Number.isFinite(v)) return gbnfLiteral(String(v));
  if (typeof v === 'boolean' || v === null) return gbnfLiteral(String(v));
  return undefined;
}

/**
 * The rule for a value matching `schema` in Gemma syntax (`defineGemmaValue` first). `relaxed`
 * collects `path: keyword` for what is not enforced.
 */
export function gemmaValue(rules: RuleSet, schema: unknown, path: string, hint: string, relaxed: string[]): string {
  if (!isObject(schema)) return 'gemma-value';
  for (const k of UNCHECKED) if (schema[k] !== undefined) relaxed.push(`${path || '/'}: ${k} (Gemma call syntax)`);
  if (schema.$ref !== undefined || schema.allOf !== undefined) return 'gemma-value';
  const members = Array.isArray(schema.enum) ? schema.enum : schema.const !== undefined ? [schema.const] : undefined;
  if (members !== undefined) {
    const alts = members.map(literal);
    if (alts.length > 0 && alts.every((a) => a !== undefined)) return rules.add(`${hint}-enum`, alts.join(' | '));
    relaxed.push(`${path || '/'}: enum (a member Gemma syntax cannot spell literally)`);
    return 'gemma-value';
  }
  const branches = schema.anyOf ?? schema.oneOf;
  if (Array.isArray(branches)) {
    const base = { ...schema, anyOf: undefined, oneOf: undefined };
    return rules.add(`${hint}-any`, branches.map((b, i) => gemmaValue(rules, isObject(b) ? { ...base, ...b } : b, `${path}/anyOf/${i}`, `${hint}-${i}`, relaxed)).join(' | '));
  }
  if (Array.isArray(schema.type)) {
    return rules.add(`${hint}-types`, schema.type.map((t, i) => gemmaValue(rules, { ...schema, type: t }, path, `${hint}-${i}`, relaxed)).join(' | '));
  }
  switch (schema.type) {
    case 'string':
      return 'gemma-string';
    case 'integer':
      return 'gemma-int';
    case 'number':
      return 'gemma-number';
    case 'boolean':
      return rules.add('gemma-bool', '"true" | "false"');
    case 'null':
      return rules.add('gemma-null', '"null"');
    case 'array':
      if (schema.items === undefined || schema.items === true) return 'gemma-array';
      {
        const item = gemmaValue(rules, schema.items, `${path}/items`, `${hint}-item`, relaxed);
        return rules.add(`${hint}-array`, `"[" (${item} ("," ${item})*)? "]"`);
      }
    case 'object':
      return gemmaObject(rules, schema, path, hint, relaxed);
    default:
      return schema.properties !== undefined ? gemmaObject(rules, schema, path, hint, relaxed) : 'gemma-value';
  }
}

/**
 * `{key:value,…}` with the declared keys in order. Built from the last key back: `tail(i)` is
 * keys i.. after something was written (each behind a comma), `head(i)` the same with nothing
 * written yet, so optional keys never leave a stray comma.
 */
function gemmaObject(rules: RuleSet, schema: Schema, path: string, hint: string, relaxed: string[]): string {
  const props = isObject(schema.properties) ? Object.entries(schema.properties) : [];
  if (props.length === 0) return schema.additionalProperties === false ? rules.add('gemma-empty', '"{" "}"') : 'gemma-object';
  if (schema.additionalProperties !== undefined && schema.additionalProperties !== false) {
    relaxed.push(`${path || '/'}: additionalProperties (the grammar writes only declared keys)`);
  }
  const required = new Set(Array.isArray(schema.required) ? (schema.required as string[]) : []);
  const kv = props.map(([key, sub], j) => {
    if (!/^[A-Za-z0-9_.$-]+$/.test(key)) relaxed.push(`${path}/properties/${key}: a key Gemma syntax writes bare`);
    return rules.add(`${hint}-${key}`, `${gbnfLiteral(`${key}:`)} ${gemmaValue(rules, sub, `${path}/properties/${key}`, `${hint}-p${j}`, relaxed)}`);
  });
  let tail = '';
  let head = '';
  let headNullable = true;
  for (let i = props.length - 1; i >= 0; i--) {
    const isRequired = required.has(props[i]![0]);
    const first = `${kv[i]}${tail ? ` ${tail}` : ''}`;
    if (isRequired) {
      head = rules.add(`${hint}-h${i}`, first);
      headNullable = false;
    } else {
      head = rules.add(`${hint}-h${i}`, head ? `${first} | ${head}` : first);
    }
    tail = rules.add(`${hint}-t${i}`, isRequired ? `"," ${first}` : `("," ${kv[i]})? ${tail}`.trim());
  }
  return rules.add(`${hint}-obj`, `"{" ${head}${headNullable ? '?' : ''} "}"`);
}
