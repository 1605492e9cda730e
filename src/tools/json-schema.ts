/**
 * A light JSON Schema checker for tools declared with a JSON Schema instead of zod.
 *
 * It covers the keywords that tool schemas use in practice: `type` (one or a list), `enum`, `const`,
 * `properties`, `required`, `additionalProperties` (boolean or schema), `items` (one schema),
 * `minItems`/`maxItems`, `minLength`/`maxLength`, `pattern`, `minimum`/`maximum`,
 * `exclusiveMinimum`/`exclusiveMaximum` (numbers), `anyOf`, `oneOf`, `allOf`. Everything else
 * (`$ref`, `format`, `if`/`then`, `dependentSchemas`, …) is ignored, i.e. accepted.
 */

export type JsonSchema = { readonly [key: string]: unknown } | boolean;

export interface JsonSchemaIssue {
  /** Where the problem is, as property names and array indexes. */
  readonly path: readonly (string | number)[];
  readonly message: string;
}

const MAX_ISSUES = 20;

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

function matchesType(value: unknown, type: string): boolean {
  const actual = typeOf(value);
  if (type === 'number') return actual === 'number' || actual === 'integer';
  return actual === type;
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

/** Checks `value` against `schema`; returns the issues found (empty when it passes). */
export function checkJsonSchema(schema: JsonSchema, value: unknown): JsonSchemaIssue[] {
  const issues: JsonSchemaIssue[] = [];
  visit(schema, value, [], issues);
  return issues;
}

function visit(schema: JsonSchema, value: unknown, path: (string | number)[], issues: JsonSchemaIssue[]): void {
  if (issues.length >= MAX_ISSUES) return;
  if (schema === true) return;
  if (schema === false) {
    issues.push({ path, message: 'no value is allowed here' });
    return;
  }
  if (typeof schema !== 'object' || schema === null) return;
  const s = schema as Record<string, unknown>;

  const types = typeof s.type === 'string' ? [s.type] : Array.isArray(s.type) ? (s.type as unknown[]) : undefined;
  if (types !== undefined && !types.some((t) => typeof t === 'string' && matchesType(value, t))) {
    issues.push({ path, message: `expected ${types.join(' or ')}, received ${typeOf(value)}` });
    return;
  }
  if (Array.isArray(s.enum) && !s.enum.some((e) => deepEqual(e, value))) {
    issues.push({ path, message: `expected one of ${JSON.stringify(s.enum)}` });
  }
  if (Object.hasOwn(s, 'const') && !deepEqual(s.const, value)) {
    issues.push({ path, message: `expected ${JSON.stringify(s.const)}` });
  }

  if (typeof value === 'string') {
    if (typeof s.minLength === 'number' && value.length < s.minLength) {
      issues.push({ path, message: `expected at least ${s.minLength} characters` });
    }
    if (typeof s.maxLength === 'number' && value.length > s.maxLength) {
      issues.push({ path, message: `expected at most ${s.maxLength} characters` });
    }
    if (typeof s.pattern === 'string') {
      let re: RegExp | undefined;
      try {
        re = new RegExp(s.pattern, 'u');
      } catch {
        re = undefined; // an invalid pattern is ignored
      }
      if (re !== undefined && !re.test(value)) issues.push({ path, message: `expected to match /${s.pattern}/` });
    }
  }
  if (typeof value === 'number') {
    if (typeof s.minimum === 'number' && value < s.minimum) issues.push({ path, message: `expected >= ${s.minimum}` });
    if (typeof s.maximum === 'number' && value > s.maximum) issues.push({ path, message: `expected <= ${s.maximum}` });
    if (typeof s.exclusiveMinimum === 'number' && value <= s.exclusiveMinimum) {
      issues.push({ path, message: `expected > ${s.exclusiveMinimum}` });
    }
    if (typeof s.exclusiveMaximum === 'number' && value >= s.exclusiveMaximum) {
      issues.push({ path, message: `expected < ${s.exclusiveMaximum}` });
    }
  }
  if (Array.isArray(value)) {
    if (typeof s.minItems === 'number' && value.length < s.minItems) {
      issues.push({ path, message: `expected at least ${s.minItems} items` });
    }
    if (typeof s.maxItems === 'number' && value.length > s.maxItems) {
      issues.push({ path, message: `expected at most ${s.maxItems} items` });
    }
    if (isSchema(s.items)) {
      value.forEach((item, i) => visit(s.items as JsonSchema, item, [...path, i], issues));
    }
  }
  if (typeOf(value) === 'object') {
    const obj = value as Record<string, unknown>;
    const props = isRecord(s.properties) ? s.properties : {};
    if (Array.isArray(s.required)) {
      for (const key of s.required) {
        if (typeof key === 'string' && !Object.hasOwn(obj, key)) {
          issues.push({ path: [...path, key], message: 'required property is missing' });
        }
      }
    }
    for (const [key, child] of Object.entries(obj)) {
      if (Object.hasOwn(props, key)) {
        const sub = props[key];
        if (isSchema(sub)) visit(sub, child, [...path, key], issues);
      } else if (s.additionalProperties === false) {
        issues.push({ path: [...path, key], message: 'unrecognised property' });
      } else if (isSchema(s.additionalProperties)) {
        visit(s.additionalProperties, child, [...path, key], issues);
      }
    }
  }

  if (Array.isArray(s.allOf)) {
    for (const sub of s.allOf) if (isSchema(sub)) visit(sub, value, path, issues);
  }
  if (Array.isArray(s.anyOf)) {
    const subs = s.anyOf.filter(isSchema);
    if (subs.length > 0 && !subs.some((sub) => checkJsonSchema(sub, value).length === 0)) {
      issues.push({ path, message: 'expected to match at least one schema of anyOf' });
    }
  }
  if (Array.isArray(s.oneOf)) {
    const subs = s.oneOf.filter(isSchema);
    const matched = subs.filter((sub) => checkJsonSchema(sub, value).length === 0).length;
    if (subs.length > 0 && matched !== 1) {
      issues.push({ path, message: `expected to match exactly one schema of oneOf, matched ${matched}` });
    }
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isSchema(value: unknown): value is JsonSchema {
  return typeof value === 'boolean' || isRecord(value);
}
