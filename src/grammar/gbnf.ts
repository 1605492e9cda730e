// GBNF text building: literal escaping and a rule set that names each distinct rule body once.

/** A GBNF string literal for `text` (matched as characters, UTF-8 decoded by llama.cpp). */
export function gbnfLiteral(text: string): string {
  let out = '"';
  for (const ch of text) {
    const c = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (c < 0x20 || c === 0x7f) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else out += ch;
  }
  return `${out}"`;
}

/** A token-id terminal: matches exactly that token, whatever its text (control tokens included). */
export function gbnfToken(id: number): string {
  return `<[${id}]>`;
}

/**
 * Rules of one grammar. `add` returns the name of a rule with that body, reusing an existing
 * rule with the same body, so shared shapes (two string properties, two tools with equal
 * arguments) compile to one rule.
 */
export class RuleSet {
  readonly #rules = new Map<string, string>();
  readonly #byBody = new Map<string, string>();

  /** A fresh name from `hint` (only [a-z0-9-] survive). */
  name(hint: string): string {
    const base = hint.toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 40) || 'r';
    let name = base;
    for (let i = 1; this.#rules.has(name); i++) name = `${base}-${i}`;
    this.#rules.set(name, '');
    return name;
  }

  /** Sets the body of a rule reserved with `name` (recursive rules: reserve, then define). */
  define(name: string, body: string): void {
    this.#rules.set(name, body);
  }

  add(hint: string, body: string): string {
    const known = this.#byBody.get(body);
    if (known !== undefined) return known;
    const name = this.name(hint);
    this.define(name, body);
    this.#byBody.set(body, name);
    return name;
  }

  has(name: string): boolean {
    return this.#rules.has(name);
  }

  toString(): string {
    const lines: string[] = [];
    for (const [name, body] of this.#rules) lines.push(`${name} ::= ${body}`);
    return `${lines.join('\n')}\n`;
  }
}
