// The containers a value of a schema branch can open, for the ambiguity limit of the
// JSON Schema compiler (json-schema.ts): branches of one anyOf/oneOf that can open the same
// array, or an object with the same first key, make the grammar engine follow several parses
// at once, and nested such choices multiply them.
type SchemaObject = Readonly<Record<string, unknown>>;

function isObject(v: unknown): v is SchemaObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export type Shape = { kind: 'any' } | { kind: 'scalar' } | { kind: 'array' } | { kind: 'object'; keys: ReadonlySet<string> | '*' };

/** The keys an object of this schema can start with ('*': any key). */
export function firstKeys(s: SchemaObject): ReadonlySet<string> | '*' {
  const props = isObject(s.properties) ? Object.keys(s.properties) : [];
  const required = new Set(Array.isArray(s.required) ? s.required.map(String) : []);
  if (props.length === 0 && required.size === 0) return s.additionalProperties === false || s.properties !== undefined ? new Set() : '*';
  const out = new Set<string>();
  for (const k of props) {
    out.add(k);
    if (required.has(k)) return out;
  }
  // Required keys that are not declared come after the declared ones.
  for (const k of required) if (!props.includes(k)) return out.add(k);
  return out;
}

function shapesOverlap(a: readonly Shape[], b: readonly Shape[]): boolean {
  for (const x of a) {
    for (const y of b) {
      if (x.kind === 'scalar' || y.kind === 'scalar') continue;
      if (x.kind === 'any' || y.kind === 'any') return true;
      if (x.kind === 'array' && y.kind === 'array') return true;
      if (x.kind === 'object' && y.kind === 'object') {
        if (x.keys === '*') {
          if (y.keys === '*' || y.keys.size > 0) return true;
        } else if (y.keys === '*') {
          if (x.keys.size > 0) return true;
        } else {
          for (const k of x.keys) if (y.keys.has(k)) return true;
        }
      }
    }
  }
  return false;
}

/** The largest group of branches that can start the same container (1 when none overlap). */
export function largestOverlap(shapes: readonly (readonly Shape[])[]): number {
  let best = 1;
  for (let i = 0; i < shapes.length; i++) {
    let n = 1;
    for (let j = 0; j < shapes.length; j++) if (j !== i && shapesOverlap(shapes[i]!, shapes[j]!)) n++;
    best = Math.max(best, n);
  }
  return best;
}
