// Tool argument schemas as JSON Schema: shared by the core (tool grammars in generate) and
// the tool layer (prompts, provider requests), so the core never imports src/tools.
import { z } from 'zod';

/** True for a zod schema (classic or mini). */
export function isZodSchema(value: unknown): value is z.core.$ZodType {
  return typeof value === 'object' && value !== null && '_zod' in value;
}

const schemaCache = new WeakMap<object, Record<string, unknown>>();

/**
 * The JSON Schema of a tool's arguments. zod schemas are converted with `z.toJSONSchema`
 * (input side, so defaulted keys are optional; unrepresentable parts become `{}`), without the
 * `$schema` key. No schema (or `true`) gives an open object schema, `false` one nothing matches.
 */
export function parametersJsonSchema(params: unknown): Record<string, unknown> {
  if (params === undefined || params === true) return { type: 'object', properties: {} };
  if (params === false) return { not: {} };
  const key = params as object;
  const cached = schemaCache.get(key);
  if (cached !== undefined) return structuredClone(cached);
  let schema: Record<string, unknown>;
  if (isZodSchema(params)) {
    const { $schema: _ignored, ...rest } = z.toJSONSchema(params, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
    schema = rest;
  } else {
    schema = structuredClone(params as Record<string, unknown>);
  }
  schemaCache.set(key, schema);
  return structuredClone(schema);
}
