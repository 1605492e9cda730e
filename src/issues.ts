// The one formatter of validation issues (zod's, or the tool layer's JSON Schema checker's):
// API options, HTTP request bodies and tool-call arguments each read it in their own style.
import type { z } from 'zod';

/** A validation issue: a zod issue, or `{ path, message }` from the JSON Schema checker. */
export type Issue = z.core.$ZodIssue | { readonly code?: undefined; readonly path: readonly PropertyKey[]; readonly message: string };

export type IssueStyle =
  /** API options: `expected X for "name" but received Y`, `unknown option "k"`. */
  | { kind: 'option'; input: unknown; what: string }
  /** HTTP bodies: as options, plus `"name" is required` and dotted unknown fields. */
  | { kind: 'field'; input: unknown }
  /** Tool-call arguments: `path: message`, zod's own words. */
  | { kind: 'argument' };

/** A received value in a message: primitives with their type, containers by kind. */
export function describeReceived(v: unknown, style: 'option' | 'field'): string {
  if (v === undefined) return style === 'field' ? 'nothing' : 'undefined';
  if (v === null) return 'null';
  if (typeof v === 'string') return `${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v)} of type string`;
  if (typeof v === 'number' || typeof v === 'boolean') return `${String(v)} of type ${typeof v}`;
  if (style === 'option' && typeof v === 'bigint') return `${String(v)} of type bigint`;
  if (Array.isArray(v)) return 'an array';
  if (style === 'field') return `a value of type ${typeof v}`;
  return `a value of type ${typeof v === 'object' ? (v.constructor?.name ?? 'object') : typeof v}`;
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let cur: unknown = root;
  for (const key of path) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<PropertyKey, unknown>)[key];
  }
  return cur;
}

/** zod's message as "what was expected": `Invalid input: expected string, received number` → `expected string`. */
function expectedOf(message: string): string {
  const e = message.replace(/^Invalid input: /, '').replace(/, received .*$/, '').replace(/^Invalid input$/, 'a valid value');
  return e.startsWith('expected') ? e : `expected ${e}`;
}

/** One phrase per issue, in the style's words. */
export function describeIssue(issue: Issue, style: IssueStyle): string {
  const name = issue.path.map(String).join('.');
  if (style.kind === 'argument') return issue.path.length > 0 ? `${name}: ${issue.message}` : issue.message;
  if (issue.code === 'unrecognized_keys') {
    const noun = `unknown ${style.kind}${issue.keys.length > 1 ? 's' : ''}`;
    const prefix = style.kind === 'field' && name ? `${name}.` : '';
    return `${noun} ${issue.keys.map((k) => `"${prefix}${k}"`).join(', ')}`;
  }
  const received = valueAt(style.input, issue.path);
  if (style.kind === 'field' && received === undefined && issue.code === 'invalid_type') return `"${name}" is required`;
  const root = style.kind === 'field' ? 'body' : style.what;
  return `${expectedOf(issue.message)} for "${name || root}" but received ${describeReceived(received, style.kind)}`;
}

/** Every issue, joined with "; ". */
export function formatIssues(issues: readonly Issue[], style: IssueStyle): string {
  return issues.map((i) => describeIssue(i, style)).join('; ');
}
