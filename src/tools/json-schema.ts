/**
 * JSON Schema checking for tools declared with a JSON Schema instead of zod, by
 * @cfworker/json-schema: a maintained validator that interprets the schema (no code generation,
 * so it also runs where `eval` and `new Function` are forbidden) and passes the JSON Schema test
 * suite for drafts 4, 7, 2019-09 and 2020-12.
 *
 * The draft is the one the root `$schema` names, else 2020-12 (what `z.toJSONSchema` emits).
 * `compileJsonSchema` refuses, with `INVALID_ARGUMENT`, what the validator would otherwise skip
 * or fail on mid-call, so nothing is accepted without being checked:
 * - a `$ref` that does not resolve inside the schema (remote references are never fetched),
 * - `$dynamicRef` / `$dynamicAnchor` (2020-12 dynamic scoping), and a `$recursiveRef` other than `'#'`,
 * - a `format` the validator does not know (`JSON_SCHEMA_FORMATS` lists the known ones),
 * - a `$schema` naming another draft, a `type` that is not a JSON type, a `pattern` or
 *   `patternProperties` key that is not a valid `u`-flag regular expression, a non-array `enum` or
 *   `required`, a non-number size or range keyword, and a subschema that is not an object or a boolean.
 *
 * Keywords outside the JSON Schema vocabularies (`title`, `examples`, `x-…`, OpenAPI's `nullable`)
 * are annotations and have no effect, as the specification requires.
 */
import { dereference, format as FORMATS, validate, type OutputUnit, type Schema, type SchemaDraft } from '@cfworker/json-schema';
import { describeReceived, expectedArgument, invalidArgument } from './errors.js';

export type JsonSchema = { readonly [key: string]: unknown } | boolean;

export interface JsonSchemaIssue {
  /** Where the problem is, as property names and array indexes. */
  readonly path: readonly (string | number)[];
  readonly message: string;
  /** The JSON Schema keyword that failed (`type`, `required`, `format`, …). */
  readonly keyword: string;
}

/** The `format` values that are checked; any other `format` is refused when the schema is compiled. */
export const JSON_SCHEMA_FORMATS: readonly string[] = Object.freeze(Object.keys(FORMATS));

/** A schema accepted by `compileJsonSchema`, ready to check values. */
export interface CompiledJsonSchema {
  /** The draft the schema is checked under. */
  readonly draft: SchemaDraft;
  /** Checks `value`; returns the issues found (empty when it passes). */
  check(value: unknown): JsonSchemaIssue[];
}

const MAX_ISSUES = 20;

const DRAFTS: Record<string, SchemaDraft> = {
  'draft-04': '4',
  'draft-07': '7',
  'draft/2019-09': '2019-09',
  'draft/2020-12': '2020-12',
};
const SCHEMA_URI = /^https?:\/\/json-schema\.org\/(draft-04|draft-07|draft\/2019-09|draft\/2020-12)\/schema#?$/;

const JSON_TYPES = new Set(['array', 'boolean', 'integer', 'null', 'number', 'object', 'string']);
/** Keywords whose value is one subschema. */
const SCHEMA_KEYWORDS = [
  'additionalItems',
  'unevaluatedItems',
  'items',
  'contains',
  'additionalProperties',
  'unevaluatedProperties',
  'propertyNames',
  'not',
  'if',
  'then',
  'else',
];
/** Keywords whose value is a list of subschemas (`items` too, before 2020-12). */
const SCHEMA_LIST_KEYWORDS = ['prefixItems', 'items', 'allOf', 'anyOf', 'oneOf'];
/** Keywords whose value maps names to subschemas. */
const SCHEMA_MAP_KEYWORDS = ['$defs', 'definitions', 'properties', 'patternProperties', 'dependentSchemas'];
const NUMBER_KEYWORDS = [
  'minimum',
  'maximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'minItems',
  'maxItems',
  'minContains',
  'maxContains',
  'minProperties',
  'maxProperties',
];

const compiled = new WeakMap<object, CompiledJsonSchema>();
const TRUE_SCHEMA: CompiledJsonSchema = Object.freeze({ draft: '2020-12' as SchemaDraft, check: () => [] });
const FALSE_SCHEMA: CompiledJsonSchema = Object.freeze({
  draft: '2020-12' as SchemaDraft,
  check: (): JsonSchemaIssue[] => [{ path: [], message: 'no value is allowed here', keyword: 'false' }],
});

/**
 * Checks that llamux can validate against `schema` and prepares it. The result is cached per schema
 * object, and the caller's object is never modified (the validator works on a copy).
 *
 * @param subject names the schema in error messages, e.g. `the parameters of tool "x"`.
 * @throws {LlamuxError} `INVALID_ARGUMENT` for a schema that is not JSON or uses something the
 *   validator cannot check (see the module comment); the message gives the schema location.
 */
export function compileJsonSchema(schema: JsonSchema, subject = 'the JSON Schema'): CompiledJsonSchema {
  if (schema === true) return TRUE_SCHEMA;
  if (schema === false) return FALSE_SCHEMA;
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw expectedArgument(subject, 'a JSON Schema object or a boolean', schema);
  }
  const cached = compiled.get(schema);
  if (cached !== undefined) return cached;

  let copy: Schema;
  try {
    copy = structuredClone(schema) as Schema;
  } catch (err) {
    throw invalidArgument(`Expected ${subject} to be JSON data but it cannot be copied: ${(err as Error).message}`, err);
  }
  const draft = draftOf(copy, subject);
  let lookup: Record<string, Schema | boolean>;
  try {
    lookup = dereference(copy);
  } catch (err) {
    throw invalidArgument(`Expected ${subject} to be a schema llamux can check but ${(err as Error).message}`, err);
  }
  inspect(copy, '', subject, lookup);

  const result: CompiledJsonSchema = Object.freeze({
    draft,
    check(value: unknown): JsonSchemaIssue[] {
      let units: OutputUnit[];
      try {
        units = validate(value, copy, draft, lookup, false).errors;
      } catch (err) {
        // The validator refuses undefined, functions, symbols and BigInts inside the value.
        return [{ path: [], message: `the value is not JSON data: ${(err as Error).message}`, keyword: 'type' }];
      }
      return toIssues(units, value);
    },
  });
  compiled.set(schema, result);
  return result;
}

/**
 * Checks `value` against `schema`; returns the issues found (empty when it passes).
 * @throws {LlamuxError} `INVALID_ARGUMENT` when the schema itself is refused (see `compileJsonSchema`).
 */
export function checkJsonSchema(schema: JsonSchema, value: unknown): JsonSchemaIssue[] {
  return compileJsonSchema(schema).check(value);
}

function draftOf(schema: Schema, subject: string): SchemaDraft {
  const uri: unknown = schema.$schema;
  if (uri === undefined) return '2020-12';
  const match = typeof uri === 'string' ? SCHEMA_URI.exec(uri) : null;
  if (match === null) {
    throw expectedArgument(
      `$schema of ${subject}`,
      'the URI of JSON Schema draft-04, draft-07, 2019-09 or 2020-12 (or no $schema, which means 2020-12)',
      uri,
    );
  }
  return DRAFTS[match[1]!]!;
}

/** Walks every subschema and refuses what the validator would skip or throw on. */
function inspect(schema: unknown, pointer: string, subject: string, lookup: Record<string, Schema | boolean>): void {
  const at = `${subject} at ${pointer === '' ? '/' : pointer}`;
  if (typeof schema === 'boolean') return;
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw expectedArgument(at, 'an object or a boolean', schema);
  }
  const s = schema as Schema;
  const unsupported = (keyword: string, why: string): never => {
    throw invalidArgument(`Unsupported JSON Schema keyword "${keyword}" in ${at}: ${why}`);
  };

  if (s.$ref !== undefined) {
    if (typeof s.$ref !== 'string') throw expectedArgument(`$ref in ${at}`, 'a string', s.$ref);
    if (s.__absolute_ref__ === undefined || lookup[s.__absolute_ref__] === undefined) {
      unsupported(
        '$ref',
        `${JSON.stringify(s.$ref)} does not resolve inside the schema; only references to this schema's own parts ` +
          '("#/$defs/name", "#anchor", or an $id declared in it) are supported, and nothing is fetched',
      );
    }
  }
  if (s.$dynamicRef !== undefined) unsupported('$dynamicRef', 'dynamic references are not supported; use $ref');
  if (s.$dynamicAnchor !== undefined) unsupported('$dynamicAnchor', 'dynamic anchors are not supported; use $anchor');
  if (s.$recursiveRef !== undefined && s.$recursiveRef !== '#') {
    unsupported('$recursiveRef', `only "#" is supported, received ${describeReceived(s.$recursiveRef)}`);
  }
  if (s.format !== undefined && !(typeof s.format === 'string' && Object.hasOwn(FORMATS, s.format))) {
    unsupported('format', `${describeReceived(s.format)} is not a format llamux can check; known formats: ${JSON_SCHEMA_FORMATS.join(', ')}`);
  }
  if (s.type !== undefined) {
    const types: unknown[] = Array.isArray(s.type) ? s.type : [s.type];
    if (types.length === 0 || !types.every((t) => typeof t === 'string' && JSON_TYPES.has(t))) {
      throw expectedArgument(`"type" in ${at}`, `one of ${[...JSON_TYPES].join(', ')} or a list of them`, s.type);
    }
  }
  if (s.enum !== undefined && !Array.isArray(s.enum)) throw expectedArgument(`"enum" in ${at}`, 'an array', s.enum);
  if (s.required !== undefined && !(Array.isArray(s.required) && s.required.every((k: unknown) => typeof k === 'string'))) {
    throw expectedArgument(`"required" in ${at}`, 'an array of strings', s.required);
  }
  for (const keyword of NUMBER_KEYWORDS) {
    if (s[keyword] !== undefined && typeof s[keyword] !== 'number') throw expectedArgument(`"${keyword}" in ${at}`, 'a number', s[keyword]);
  }
  for (const keyword of ['exclusiveMinimum', 'exclusiveMaximum']) {
    const v: unknown = s[keyword];
    if (v !== undefined && typeof v !== 'number' && typeof v !== 'boolean') {
      throw expectedArgument(`"${keyword}" in ${at}`, 'a number (or, in draft-04, a boolean)', v);
    }
  }
  const patterns: [string, unknown][] = [];
  if (s.pattern !== undefined) patterns.push([`"pattern" in ${at}`, s.pattern]);
  if (isRecord(s.patternProperties)) {
    for (const key of Object.keys(s.patternProperties)) patterns.push([`the patternProperties key in ${at}`, key]);
  }
  for (const [where, pattern] of patterns) {
    if (typeof pattern !== 'string') throw expectedArgument(where, 'a regular expression string', pattern);
    try {
      new RegExp(pattern, 'u');
    } catch (err) {
      throw invalidArgument(`Expected ${where} to be a valid regular expression (u flag) but received ${JSON.stringify(pattern)}: ${(err as Error).message}`);
    }
  }

  const child = (value: unknown, key: string): void => inspect(value, `${pointer}/${escapePointer(key)}`, subject, lookup);
  for (const keyword of SCHEMA_KEYWORDS) {
    if (s[keyword] !== undefined && !Array.isArray(s[keyword])) child(s[keyword], keyword);
  }
  for (const keyword of SCHEMA_LIST_KEYWORDS) {
    const list: unknown = s[keyword];
    if (Array.isArray(list)) list.forEach((sub, i) => inspect(sub, `${pointer}/${keyword}/${i}`, subject, lookup));
    else if (list !== undefined && keyword !== 'items') throw expectedArgument(`"${keyword}" in ${at}`, 'an array of schemas', list);
  }
  for (const keyword of SCHEMA_MAP_KEYWORDS) {
    const map: unknown = s[keyword];
    if (map === undefined) continue;
    if (!isRecord(map)) throw expectedArgument(`"${keyword}" in ${at}`, 'an object of schemas', map);
    for (const [key, sub] of Object.entries(map)) inspect(sub, `${pointer}/${keyword}/${escapePointer(key)}`, subject, lookup);
  }
  if (isRecord(s.dependencies)) {
    for (const [key, sub] of Object.entries(s.dependencies)) {
      if (!Array.isArray(sub)) inspect(sub, `${pointer}/dependencies/${escapePointer(key)}`, subject, lookup);
    }
  }
}

/**
 * Turns the validator's output units into issues: the most specific failure of each branch
 * (a failed `properties` or `items` wrapper gives way to what failed inside it), one issue per
 * failed `anyOf`/`oneOf`/`contains` (not one per alternative), with the path of the bad value.
 */
function toIssues(raw: readonly OutputUnit[], value: unknown): JsonSchemaIssue[] {
  // A failed `false` subschema reports its value's location as its keyword location; it belongs to
  // the unit just before it (the `properties`/`additionalProperties`/… unit that applied it).
  const units = raw.map((u, i) =>
    u.keyword === 'false' && i > 0 ? { ...u, keywordLocation: raw[i - 1]!.keywordLocation } : u,
  );
  const collapsing = units.filter((u) => u.keyword === 'anyOf' || u.keyword === 'oneOf' || u.keyword === 'contains' || u.keyword === 'not');
  // `u` reports on a part of what `outer` reports: a deeper keyword, or (for `additionalProperties`
  // and the like, whose per-property failures share its keyword location) a deeper value.
  // A failed `then`/`else` is reported at `…/if`, and what failed inside it at `…/then/…` or `…/else/…`.
  const scopes = (outer: OutputUnit): string[] =>
    outer.keyword === 'if' ? [outer.keywordLocation.replace(/\/if$/, '/then'), outer.keywordLocation.replace(/\/if$/, '/else')] : [outer.keywordLocation];
  const inside = (u: OutputUnit, outer: OutputUnit): boolean =>
    scopes(outer).some((scope) => u.keywordLocation.startsWith(`${scope}/`)) ||
    (u.keywordLocation === outer.keywordLocation && u.instanceLocation.startsWith(`${outer.instanceLocation}/`));
  const kept = units.filter((u) => !collapsing.some((c) => c !== u && inside(u, c)));
  const leaves = kept.filter((u) => !kept.some((other) => other !== u && inside(other, u)));
  const issues: JsonSchemaIssue[] = [];
  const seen = new Set<string>();
  for (const unit of leaves) {
    const issue = toIssue(unit, value);
    const key = JSON.stringify([issue.path, issue.message]);
    if (seen.has(key)) continue;
    seen.add(key);
    issues.push(issue);
    if (issues.length >= MAX_ISSUES) break;
  }
  return issues;
}

function toIssue(unit: OutputUnit, root: unknown): JsonSchemaIssue {
  const path = instancePath(unit.instanceLocation, root);
  const text = unit.error;
  let m: RegExpExecArray | null;
  if (unit.keyword === 'type' && (m = /^Instance type "(\w+)" is invalid\. Expected (.+)\.$/.exec(text)) !== null) {
    return { path, keyword: 'type', message: `expected ${m[2]!.replaceAll('"', '').split(', ').join(' or ')}, received ${m[1]!}` };
  }
  if (unit.keyword === 'required' && (m = /^Instance does not have required property "(.*)"\.$/.exec(text)) !== null) {
    return { path: [...path, m[1]!], keyword: 'required', message: 'required property is missing' };
  }
  if (unit.keyword === 'false') {
    const unrecognised = /\/(additional|unevaluated)Properties$/.test(unit.keywordLocation);
    return { path, keyword: 'false', message: unrecognised ? 'unrecognised property' : 'no value is allowed here' };
  }
  if (unit.keyword === 'enum' && (m = /^Instance does not match any of (.*)\.$/s.exec(text)) !== null) {
    return { path, keyword: 'enum', message: `expected one of ${m[1]!}` };
  }
  if (unit.keyword === 'const' && (m = /^Instance does not match (.*)\.$/s.exec(text)) !== null) {
    return { path, keyword: 'const', message: `expected ${m[1]!}` };
  }
  return { path, keyword: unit.keyword, message: text.replace(/\.$/, '').replace(/^Instance /, 'the value ') };
}

/** `#/a/0` → `['a', 0]` (indexes become numbers where the value there is an array). */
function instancePath(location: string, root: unknown): (string | number)[] {
  const tokens = location.replace(/^#\/?/, '');
  if (tokens === '') return [];
  const path: (string | number)[] = [];
  let current: unknown = root;
  for (const raw of tokens.split('/')) {
    let token: string;
    try {
      token = decodeURIComponent(raw);
    } catch {
      token = raw;
    }
    token = token.replaceAll('~1', '/').replaceAll('~0', '~');
    if (Array.isArray(current) && /^(0|[1-9]\d*)$/.test(token)) {
      path.push(Number(token));
      current = current[Number(token)];
    } else {
      path.push(token);
      current = isRecord(current) ? current[token] : undefined;
    }
  }
  return path;
}

function escapePointer(key: string): string {
  return key.replaceAll('~', '~0').replaceAll('/', '~1');
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
