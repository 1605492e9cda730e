// JSON Schema → GBNF rules for tool arguments. The grammar enforces the structural part of a
// schema (types, required and declared properties, enums/const, nested objects and arrays,
// string and array lengths, anyOf/oneOf, local $ref); keywords that only narrow values further
// are not enforced and are reported by path in `relaxed` (see docs/api.md, "Tool grammars").
import { RuleSet, gbnfLiteral } from './gbnf.js';
import { firstKeys, largestOverlap, type Shape } from './branch-shapes.js';

type SchemaObject = Readonly<Record<string, unknown>>;
type Schema = SchemaObject | boolean;

/** A schema the grammar cannot serve: unsatisfiable, or malformed in a way that matters here. */
export class SchemaGrammarError extends Error {
  readonly path: string;
  constructor(path: string, message: string) {
    super(message);
    this.path = path;
  }
}

/**
 * The most alternatives a value may be parsed as at once, multiplied over nesting. Branches of an
 * anyOf (or oneOf) that can both start the same array, or the same object key, are parsed side
 * by side by the grammar engine, and nested ones multiply: 2 such branches 16 levels deep are
 * 65 536 parses of one output. A schema beyond this bound, or with such a choice inside a
 * recursive $ref, is refused (the error names the JSON pointer of the choice).
 */
export const MAX_AMBIGUITY = 16;

/** Longest string (`maxLength`) and array (`maxItems`) bounds compiled exactly; larger ones are relaxed. */
export const MAX_EXACT_LENGTH = 256;
export const MAX_EXACT_ITEMS = 64;

/** Keywords that only narrow values: accepted, not enforced by the grammar, reported in `relaxed`. */
const RELAXED_KEYWORDS = [
  'pattern', 'format', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
  'uniqueItems', 'contains', 'minContains', 'maxContains', 'minProperties', 'maxProperties',
  'patternProperties', 'propertyNames', 'dependentRequired', 'dependentSchemas', 'dependencies',
  'not', 'if', 'then', 'else', 'unevaluatedProperties', 'unevaluatedItems', 'prefixItems', 'additionalItems',
] as const;

const JSON_TYPES = new Set(['string', 'number', 'integer', 'boolean', 'null', 'object', 'array']);

// The fixed JSON rules, defined once per grammar when first used.
const PRIMITIVES: Record<string, string> = {
  sp: '" "?',
  'json-char': '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})',
  'json-string': '"\\"" json-char* "\\""',
  'json-int': '"-"? ("0" | [1-9] [0-9]{0,15})',
  'json-integer': 'json-int',
  'json-number': 'json-int ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?',
  'json-boolean': '"true" | "false"',
  'json-null': '"null"',
  'json-value': 'json-object | json-array | json-string | json-number | json-boolean | json-null',
  'json-object': '"{" sp (json-string ":" sp json-value ("," sp json-string ":" sp json-value)*)? sp "}"',
  'json-array': '"[" sp (json-value ("," sp json-value)*)? sp "]"',
};
const PRIMITIVE_DEPS: Record<string, readonly string[]> = {
  'json-string': ['json-char'],
  'json-integer': ['json-int'],
  'json-number': ['json-int'],
  'json-value': ['json-object', 'json-array', 'json-string', 'json-number', 'json-boolean', 'json-null'],
  'json-object': ['sp', 'json-string', 'json-value'],
  'json-array': ['sp', 'json-value'],
};

function isObject(v: unknown): v is SchemaObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function jsonType(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

function fits(value: unknown, types: readonly string[] | undefined): boolean {
  if (types === undefined) return true;
  const t = jsonType(value);
  return types.includes(t) || (t === 'integer' && types.includes('number'));
}

function pointerEscape(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** Converts the schemas of one grammar; rules are shared through the RuleSet. */
export class SchemaConverter {
  readonly relaxed: string[] = [];
  readonly #rules: RuleSet;
  readonly #root: Schema;
  readonly #refs = new Map<string, string | null>();
  readonly #noted = new Set<string>();
  /** Ambiguity along the path being converted (a product of overlapping branch counts). */
  #factor = 1;
  /** The largest #factor seen inside the conversion in progress. */
  #maxFactor = 1;
  /** Refs being converted, with #factor at their entry; done refs with the ambiguity inside them. */
  readonly #refEntry = new Map<string, number>();
  readonly #refInside = new Map<string, number>();

  constructor(rules: RuleSet, root: Schema) {
    this.#rules = rules;
    this.#root = root;
  }

  /** The rule name for `schema`, or undefined when no value can satisfy it. */
  convert(schema: unknown, path: string, hint: string): string | undefined {
    if (schema === true) return this.prim('json-value');
    if (schema === false) return undefined;
    if (!isObject(schema)) throw new SchemaGrammarError(path, 'a schema must be an object or a boolean');
    this.#noteRelaxed(schema, path);
    if (schema.$ref !== undefined) return this.#ref(schema, path, hint);
    if (schema.allOf !== undefined) return this.convert(this.#mergeAllOf(schema, path), path, hint);
    const branches = schema.anyOf ?? schema.oneOf;
    if (branches !== undefined) {
      const key = schema.anyOf !== undefined ? 'anyOf' : 'oneOf';
      if (!Array.isArray(branches)) throw new SchemaGrammarError(`${path}/${key}`, `${key} must be an array`);
      if (key === 'oneOf') this.#note(`${path}/oneOf`, 'oneOf (compiled as anyOf: exclusivity is not enforced)');
      const base: Record<string, unknown> = { ...schema };
      delete base.anyOf;
      delete base.oneOf;
      const alts: string[] = [];
      const mergedBranches = branches.map((b) => (b === true ? base : b === false ? false : isObject(b) ? { ...base, ...b } : b));
      const k = this.#overlap(mergedBranches);
      const outer = this.#factor;
      if (k > 1) {
        this.#factor *= k;
        this.#maxFactor = Math.max(this.#maxFactor, this.#factor);
        if (this.#factor > MAX_AMBIGUITY) {
          throw new SchemaGrammarError(
            `${path}/${key}`,
            `ambiguous: ${k} branches can start the same array or object, nested in other such choices (${this.#factor} parses at once, at most ${MAX_AMBIGUITY}); make the branches start differently (distinct first keys, or one array type with an anyOf of item types)`,
          );
        }
      }
      try {
        mergedBranches.forEach((merged, i) => {
          const r = this.convert(merged, `${path}/${key}/${i}`, `${hint}-${i}`);
          if (r !== undefined && !alts.includes(r)) alts.push(r);
        });
      } finally {
        this.#factor = outer;
      }
      if (alts.length === 0) throw new SchemaGrammarError(path, `no ${key} branch can be satisfied`);
      return alts.length === 1 ? alts[0] : this.#rules.add(hint, alts.join(' | '));
    }
    const types = this.#types(schema, path);
    if (schema.const !== undefined) {
      if (!fits(schema.const, types)) throw new SchemaGrammarError(path, 'const does not match the schema type');
      return this.#rules.add(hint, gbnfLiteral(JSON.stringify(schema.const)));
    }
    if (schema.enum !== undefined) {
      if (!Array.isArray(schema.enum)) throw new SchemaGrammarError(`${path}/enum`, 'enum must be an array');
      const values = schema.enum.filter((v) => fits(v, types));
      if (values.length === 0) throw new SchemaGrammarError(path, 'no enum value matches the schema type');
      const lits = [...new Set(values.map((v) => gbnfLiteral(JSON.stringify(v))))];
      return this.#rules.add(hint, lits.join(' | '));
    }
    const effective = types ?? this.#inferTypes(schema);
    if (effective === undefined) return this.prim('json-value');
    if (effective.length === 0) throw new SchemaGrammarError(path, 'type lists no type');
    const alts: string[] = [];
    for (const t of effective) {
      const r = this.#typed(t, schema, path, effective.length > 1 ? `${hint}-${t}` : hint);
      if (r !== undefined && !alts.includes(r)) alts.push(r);
    }
    if (alts.length === 0) throw new SchemaGrammarError(path, 'no value of the allowed types can satisfy the schema');
    return alts.length === 1 ? alts[0] : this.#rules.add(hint, alts.join(' | '));
  }

  /** Defines a fixed JSON rule (and what it uses) once; returns its name. */
  prim(name: string): string {
    if (!this.#rules.has(name)) {
      this.#rules.define(name, PRIMITIVES[name]!);
      for (const dep of PRIMITIVE_DEPS[name] ?? []) this.prim(dep);
    }
    return name;
  }

  #note(where: string, what: string): void {
    const entry = `${where || '/'}: ${what}`;
    if (this.#noted.has(entry)) return;
    this.#noted.add(entry);
    this.relaxed.push(entry);
  }

  #noteRelaxed(s: SchemaObject, path: string): void {
    for (const k of RELAXED_KEYWORDS) if (s[k] !== undefined) this.#note(path, `${k} (not enforced)`);
  }

  #types(s: SchemaObject, path: string): string[] | undefined {
    if (s.type === undefined) return undefined;
    const list = Array.isArray(s.type) ? s.type : [s.type];
    for (const t of list) {
      if (typeof t !== 'string' || !JSON_TYPES.has(t)) throw new SchemaGrammarError(`${path}/type`, `unknown type ${JSON.stringify(t)}`);
    }
    const out = [...new Set(list as string[])];
    if (s.nullable === true && !out.includes('null')) out.push('null');
    return out;
  }

  #inferTypes(s: SchemaObject): string[] | undefined {
    if (s.properties !== undefined || s.required !== undefined || s.additionalProperties !== undefined) return ['object'];
    if (s.items !== undefined || s.minItems !== undefined || s.maxItems !== undefined) return ['array'];
    if (s.minLength !== undefined || s.maxLength !== undefined) return ['string'];
    return undefined;
  }

  #typed(t: string, s: SchemaObject, path: string, hint: string): string | undefined {
    switch (t) {
      case 'string':
        return this.#string(s, path, hint);
      case 'integer':
        return this.prim('json-integer');
      case 'number':
        return this.prim('json-number');
      case 'boolean':
        return this.prim('json-boolean');
      case 'null':
        return this.prim('json-null');
      case 'object':
        return this.#object(s, path, hint);
      default:
        return this.#array(s, path, hint);
    }
  }

  #count(s: SchemaObject, key: string, path: string): number | undefined {
    const v = s[key];
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new SchemaGrammarError(`${path}/${key}`, `${key} must be a non-negative integer`);
    return v;
  }

  #string(s: SchemaObject, path: string, hint: string): string | undefined {
    let min = this.#count(s, 'minLength', path) ?? 0;
    let max = this.#count(s, 'maxLength', path);
    if (max !== undefined && min > max) throw new SchemaGrammarError(path, `minLength ${min} exceeds maxLength ${max}`);
    if (max !== undefined && max > MAX_EXACT_LENGTH) {
      this.#note(path, `maxLength above ${MAX_EXACT_LENGTH} (not enforced)`);
      max = undefined;
    }
    if (min > MAX_EXACT_LENGTH) {
      this.#note(path, `minLength above ${MAX_EXACT_LENGTH} (not enforced)`);
      min = 0;
    }
    if (min === 0 && max === undefined) return this.prim('json-string');
    this.prim('json-char');
    const rep = max === undefined ? `{${min},}` : min === max ? `{${min}}` : `{${min},${max}}`;
    return this.#rules.add(`${hint}-str`, `"\\"" json-char${rep} "\\""`);
  }

  #object(s: SchemaObject, path: string, hint: string): string {
    this.prim('sp');
    const props = s.properties === undefined ? undefined : s.properties;
    if (props !== undefined && !isObject(props)) throw new SchemaGrammarError(`${path}/properties`, 'properties must be an object');
    if (s.required !== undefined && !Array.isArray(s.required)) throw new SchemaGrammarError(`${path}/required`, 'required must be an array');
    const required = new Set((s.required as unknown[] | undefined)?.map(String) ?? []);
    const extra = s.additionalProperties;
    const entries: Array<{ kv: string; required: boolean }> = [];
    const kv = (key: string, rule: string): string => `${gbnfLiteral(JSON.stringify(key))} ":" sp ${rule}`;
    for (const [key, sub] of Object.entries(props ?? {})) {
      const r = this.convert(sub, `${path}/properties/${pointerEscape(key)}`, `${hint}-${key}`);
      if (r === undefined) {
        if (required.has(key)) throw new SchemaGrammarError(`${path}/properties/${pointerEscape(key)}`, `required property "${key}" can have no value`);
        continue;
      }
      entries.push({ kv: kv(key, r), required: required.has(key) });
    }
    for (const key of required) {
      if (props !== undefined && Object.hasOwn(props, key)) continue;
      const r = extra === false ? undefined : this.convert(extra ?? true, `${path}/additionalProperties`, `${hint}-extra`);
      if (r === undefined) throw new SchemaGrammarError(path, `required property "${key}" is not allowed by additionalProperties`);
      entries.push({ kv: kv(key, r), required: true });
    }
    if (entries.length === 0) {
      if (props !== undefined || extra === false) return this.#rules.add(`${hint}-empty`, '"{" sp "}"');
      // A free-form object: any keys, values from additionalProperties.
      const v = this.convert(extra ?? true, `${path}/additionalProperties`, `${hint}-value`);
      if (v === undefined) return this.#rules.add(`${hint}-empty`, '"{" sp "}"');
      if (v === 'json-value') return this.prim('json-object');
      this.prim('json-string');
      return this.#rules.add(hint, `"{" sp (json-string ":" sp ${v} ("," sp json-string ":" sp ${v})*)? sp "}"`);
    }
    // Keys in declared order. rest(i): what may follow once something was written.
    const rest: string[] = new Array<string>(entries.length + 1).fill('');
    for (let i = entries.length - 1; i >= 1; i--) {
      const e = entries[i]!;
      const item = e.required ? `"," sp ${e.kv}` : `("," sp ${e.kv})?`;
      const body = rest[i + 1] ? `${item} ${rest[i + 1]}` : item;
      rest[i] = this.#rules.add(`${hint}-rest`, body);
    }
    // The first key written is any optional one before the first required key, or that key.
    const alts: string[] = [];
    let anyRequired = false;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      alts.push(rest[i + 1] ? `${e.kv} ${rest[i + 1]}` : e.kv);
      if (e.required) {
        anyRequired = true;
        break;
      }
    }
    const inner = alts.length === 1 ? alts[0]! : `(${alts.join(' | ')})`;
    return this.#rules.add(hint, `"{" sp ${anyRequired ? inner : `(${alts.length === 1 ? inner : alts.join(' | ')})?`} sp "}"`);
  }

  #array(s: SchemaObject, path: string, hint: string): string {
    this.prim('sp');
    let items: unknown = s.items;
    if (Array.isArray(items)) {
      this.#note(`${path}/items`, 'items as a tuple (not enforced)');
      items = true;
    }
    let min = this.#count(s, 'minItems', path) ?? 0;
    let max = this.#count(s, 'maxItems', path);
    if (max !== undefined && min > max) throw new SchemaGrammarError(path, `minItems ${min} exceeds maxItems ${max}`);
    const item = this.convert(items ?? true, `${path}/items`, `${hint}-item`);
    if (item === undefined || max === 0) {
      if (min > 0) throw new SchemaGrammarError(path, 'minItems needs items but items allows none');
      return this.#rules.add(`${hint}-empty`, '"[" sp "]"');
    }
    if (max !== undefined && max > MAX_EXACT_ITEMS) {
      this.#note(path, `maxItems above ${MAX_EXACT_ITEMS} (not enforced)`);
      max = undefined;
    }
    if (min > MAX_EXACT_ITEMS) {
      this.#note(path, `minItems above ${MAX_EXACT_ITEMS} (not enforced)`);
      min = 1;
    }
    const more = (lo: number, hi: number | undefined): string =>
      hi === undefined ? (lo === 0 ? '*' : `{${lo},}`) : lo === hi ? `{${lo}}` : `{${lo},${hi}}`;
    const tail = (lo: number, hi: number | undefined): string => (hi === 0 ? '' : ` ("," sp ${item})${more(lo, hi)}`);
    const body =
      min === 0
        ? `"[" sp (${item}${tail(0, max === undefined ? undefined : max - 1)})? sp "]"`
        : `"[" sp ${item}${tail(min - 1, max === undefined ? undefined : max - 1)} sp "]"`;
    return this.#rules.add(hint, body);
  }

  #ref(s: SchemaObject, path: string, hint: string): string | undefined {
    const ref = s.$ref;
    if (typeof ref !== 'string' || !(ref === '#' || ref.startsWith('#/'))) {
      throw new SchemaGrammarError(`${path}/$ref`, `only local references ("#/…") are supported, not ${JSON.stringify(ref)}`);
    }
    const known = this.#refs.get(ref);
    if (known !== undefined) {
      if (known === null) throw new SchemaGrammarError(`${path}/$ref`, `${ref} can have no value`);
      const entry = this.#refEntry.get(ref);
      if (entry !== undefined && this.#factor > entry) {
        // Recursion through an ambiguous choice: the parses multiply with every level.
        throw new SchemaGrammarError(`${path}/$ref`, `ambiguous recursion: ${ref} refers back to itself through anyOf branches that can start the same array or object, so the parses at once grow with every level`);
      }
      const inside = this.#refInside.get(ref) ?? 1;
      if (this.#factor * inside > MAX_AMBIGUITY) {
        throw new SchemaGrammarError(`${path}/$ref`, `ambiguous: ${ref} holds choices whose branches can start the same array or object, and here it is nested in another (${this.#factor * inside} parses at once, at most ${MAX_AMBIGUITY})`);
      }
      this.#maxFactor = Math.max(this.#maxFactor, this.#factor * inside);
      return known;
    }
    const target = this.#resolve(ref, `${path}/$ref`);
    // Reserve the name first so recursive schemas refer to themselves.
    const name = this.#rules.name(`ref-${ref.slice(2) || 'root'}`);
    this.#refs.set(ref, name);
    const siblings: Record<string, unknown> = { ...s };
    delete siblings.$ref;
    const hasSiblings = Object.keys(siblings).some((k) => !['description', 'title', 'default', 'examples', '$comment'].includes(k));
    if (hasSiblings) this.#note(path, '$ref siblings (ignored: the referenced schema applies)');
    const entry = this.#factor;
    const outerMax = this.#maxFactor;
    this.#maxFactor = entry;
    this.#refEntry.set(ref, entry);
    let r: string | undefined;
    try {
      r = this.convert(target, ref, `${hint}-ref`);
    } finally {
      this.#refEntry.delete(ref);
      this.#refInside.set(ref, this.#maxFactor / entry);
      this.#maxFactor = Math.max(outerMax, this.#maxFactor);
    }
    if (r === undefined) {
      this.#refs.set(ref, null);
      throw new SchemaGrammarError(`${path}/$ref`, `${ref} can have no value`);
    }
    this.#rules.define(name, r);
    return name;
  }

  /** The value a local $ref points at. */
  #resolve(ref: string, where: string): unknown {
    let target: unknown = this.#root;
    for (const raw of ref === '#' ? [] : ref.slice(2).split('/')) {
      let decoded: string;
      try {
        decoded = decodeURIComponent(raw);
      } catch {
        throw new SchemaGrammarError(where, `${JSON.stringify(ref)} is not a valid JSON pointer: malformed %-encoding in ${JSON.stringify(raw)}`);
      }
      const key = decoded.replace(/~1/g, '/').replace(/~0/g, '~');
      target = isObject(target) ? target[key] : undefined;
      if (target === undefined) throw new SchemaGrammarError(where, `${ref} does not resolve inside the schema`);
    }
    return target;
  }

  /**
   * How many of these branches can start the same container: the largest group that can open
   * the same array, or an object with the same first key (any value overlaps every container).
   * Scalars never count: their ambiguity ends within the value.
   */
  #overlap(branches: readonly unknown[]): number {
    return largestOverlap(branches.map((b) => this.#shapes(b, 0)));
  }

  /** The containers a schema's values can open (for #overlap). */
  #shapes(schema: unknown, depth: number): Shape[] {
    if (schema === false) return [];
    if (schema === true || !isObject(schema) || depth > 32) return [{ kind: 'any' }];
    if (schema.$ref !== undefined) {
      const ref = schema.$ref;
      if (typeof ref !== 'string' || !(ref === '#' || ref.startsWith('#/'))) return [{ kind: 'any' }];
      let target: unknown;
      try {
        target = this.#resolve(ref, '');
      } catch {
        return [{ kind: 'any' }];
      }
      return this.#shapes(target, depth + 1);
    }
    const branches = schema.anyOf ?? schema.oneOf;
    if (Array.isArray(branches)) {
      const base: Record<string, unknown> = { ...schema };
      delete base.anyOf;
      delete base.oneOf;
      return branches.flatMap((b) => this.#shapes(b === true ? base : isObject(b) ? { ...base, ...b } : b, depth + 1));
    }
    if (Array.isArray(schema.allOf)) {
      // Merged as convert() does; unknown shapes count as any value.
      const merged: Record<string, unknown> = { ...schema };
      delete merged.allOf;
      for (const part of schema.allOf) if (isObject(part)) Object.assign(merged, part);
      return this.#shapes(merged, depth + 1);
    }
    if (schema.const !== undefined || schema.enum !== undefined) return [{ kind: 'scalar' }];
    let types: string[] | undefined;
    try {
      types = this.#types(schema, '') ?? this.#inferTypes(schema);
    } catch {
      return [{ kind: 'any' }];
    }
    if (types === undefined) return [{ kind: 'any' }];
    return types.map((t): Shape => {
      if (t === 'array') return { kind: 'array' };
      if (t !== 'object') return { kind: 'scalar' };
      return { kind: 'object', keys: firstKeys(schema) };
    });
  }

  #mergeAllOf(s: SchemaObject, path: string): Schema {
    const list = s.allOf;
    if (!Array.isArray(list)) throw new SchemaGrammarError(`${path}/allOf`, 'allOf must be an array');
    const out: Record<string, unknown> = { ...s };
    delete out.allOf;
    for (const [i, part] of list.entries()) {
      if (part === true) continue;
      if (part === false) return false;
      if (!isObject(part)) throw new SchemaGrammarError(`${path}/allOf/${i}`, 'a schema must be an object or a boolean');
      for (const [k, v] of Object.entries(part)) {
        if (k === 'properties' && isObject(v)) out.properties = { ...(isObject(out.properties) ? out.properties : {}), ...v };
        else if (k === 'required' && Array.isArray(v)) out.required = [...new Set([...((out.required as unknown[]) ?? []), ...v])];
        else if (k === 'type' && out.type !== undefined) {
          const a = Array.isArray(out.type) ? out.type : [out.type];
          const b = Array.isArray(v) ? v : [v];
          const both = new Set<unknown>();
          for (const t of a) {
            if (b.includes(t)) both.add(t);
            else if ((t === 'integer' && b.includes('number')) || (t === 'number' && b.includes('integer'))) both.add('integer');
          }
          out.type = [...both];
        } else {
          if (out[k] !== undefined && JSON.stringify(out[k]) !== JSON.stringify(v)) this.#note(`${path}/allOf/${i}`, `${k} (merged shallowly: the last value applies)`);
          out[k] = v;
        }
      }
    }
    return out;
  }
}
