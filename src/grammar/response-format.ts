// Structured output (`generate({ responseFormat })`): the whole output is one JSON value, of a
// JSON Schema or any JSON object, through the same schema compiler as tool arguments.
import { RuleSet } from './gbnf.js';
import { SchemaConverter, SchemaGrammarError } from './json-schema.js';

export const RESPONSE_FORMAT_ROOT = 'root';

export interface ResponseFormatGrammar {
  gbnf: string;
  root: string;
  /** Schema keywords accepted but not enforced by the grammar (see docs/api.md, "Tool grammars"). */
  relaxed: string[];
}

/**
 * GBNF for an output that is exactly one JSON value: of `schema`, or any JSON object when
 * `schema` is 'object' (OpenAI's json_object). Generation can end only once the value is
 * complete (the grammar then allows nothing but end of generation).
 * @throws SchemaGrammarError when the schema cannot be compiled (its JSON pointer in `path`)
 */
export function compileResponseFormat(schema: Readonly<Record<string, unknown>> | boolean | 'object'): ResponseFormatGrammar {
  const rules = new RuleSet();
  rules.name(RESPONSE_FORMAT_ROOT); // reserved first: printed first
  const conv = new SchemaConverter(rules, schema === 'object' ? true : schema);
  const value = schema === 'object' ? conv.prim('json-object') : conv.convert(schema, '', 'value');
  if (value === undefined) throw new SchemaGrammarError('', 'the schema allows no value');
  rules.define(RESPONSE_FORMAT_ROOT, value);
  return { gbnf: rules.toString(), root: RESPONSE_FORMAT_ROOT, relaxed: conv.relaxed };
}
