// The request schema is listed once, in src/native/request-schema.ts; the C++ readers are
// written by hand. This test reads them as text (native/js/context.cc, request_js.cc,
// request_js.h) and checks that each reader reads exactly the keys of its list, with the same
// types, both ways, the way test/api/errors.test.ts checks native/engine/errors.h.
//
// How a C++ read is recognised (anything else under a key-reading function fails the test):
// - `Require<Type>(env, o, "key")` and `ReadVocabTokens(env, o, "key", …)`: the readers of
//   request_js.h that take a key; READER_TYPES gives each one's JS type, and a reader added to
//   the header without an entry there fails the test.
// - Helpers that take the object but no key (ReadSampling, ReadDropTokens): their own reads,
//   from their bodies in request_js.cc, count where they are called.
// - Four keys are read without a keyed reader, so a single regex cannot type them: `Napi::Value
//   v = o.Get("key")` followed by checks on `v`. Their type is taken from the same key's
//   `Require…` read (expectCommitted), the `MissingKey(env, "key", "<expected>")` message
//   (stop: "an array of strings", logitBiasValues: "a Float32Array") or `Model::Unwrap(v)`
//   (draftModel), `media::ReadRequestMedia(env, v)` (media); `v.IsNull()` adds `| null`. Any other form of read fails with its text.
// - A mode (a named enum of the schema) is a string or number on the wire; the string values
//   C++ compares the read value with (`mode != "ngram"`, `op == "end"`) must be the enum's
//   values, and the numeric enums must match llama.h's enums, which the engine casts them to.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  FLASH_ATTENTION,
  NATIVE_CONTEXT_KEYS,
  NATIVE_EMBED_JOB_KEYS,
  NATIVE_REQUEST_KEYS,
  NATIVE_SESSION_COMMAND_KEYS,
  POOLING_TYPES,
  SESSION_OPS,
  SPECULATIVE_MODES,
  type WireSchema,
} from '../../src/native/request-schema.js';
import { projectRoot } from '../helpers/paths.js';

const jsDir = join(projectRoot, 'native', 'js');

/** Which C++ function reads which key list. */
const READERS: ReadonlyArray<{ fn: string; schema: WireSchema; name: string }> = [
  { fn: 'Context::Context', schema: NATIVE_CONTEXT_KEYS, name: 'NATIVE_CONTEXT_KEYS' },
  { fn: 'Context::Submit', schema: NATIVE_REQUEST_KEYS, name: 'NATIVE_REQUEST_KEYS' },
  { fn: 'Context::SessionCommand', schema: NATIVE_SESSION_COMMAND_KEYS, name: 'NATIVE_SESSION_COMMAND_KEYS' },
  { fn: 'Context::Embed', schema: NATIVE_EMBED_JOB_KEYS, name: 'NATIVE_EMBED_JOB_KEYS' },
];

/** The JS type each keyed reader of request_js.h accepts (its MissingKey message). */
const READER_TYPES: Readonly<Record<string, string>> = {
  RequireBool: 'boolean',
  RequireNumber: 'number',
  RequireInt: 'number',
  RequireString: 'string',
  RequireInt32Array: 'Int32Array',
  RequireFloat32Array: 'Float32Array',
  ReadVocabTokens: 'Int32Array',
};

/** `MissingKey(env, "key", "<expected>")` messages of the reads made without a helper. */
const EXPECTED_TYPES: Readonly<Record<string, string>> = {
  'a boolean': 'boolean',
  'a number': 'number',
  'a string': 'string',
  'an Int32Array': 'Int32Array',
  'a Float32Array': 'Float32Array',
  'an array of strings': 'string[]',
};

/** C++ source with its comments blanked out (string and character literals kept). */
function stripComments(src: string): string {
  let out = '';
  for (let i = 0; i < src.length; ) {
    const c = src[i]!;
    if (c === '/' && src[i + 1] === '/') {
      const end = src.indexOf('\n', i);
      i = end < 0 ? src.length : end;
    } else if (c === '/' && src[i + 1] === '*') {
      const end = src.indexOf('*/', i + 2);
      i = end < 0 ? src.length : end + 2;
      out += ' ';
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < src.length && src[j] !== c) j += src[j] === '\\' ? 2 : 1;
      out += src.slice(i, j + 1);
      i = j + 1;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

/** Function definitions of a (comment-free) C++ source: qualified name → body. */
function functionBodies(code: string): Map<string, string> {
  const out = new Map<string, string>();
  // A definition: `Name(…) {` or `Class::Name(…) : init(…) {` at the start of a line.
  for (const m of code.matchAll(/^[\w:<>*& ]*?\b((?:\w+::)?~?\w+)\(([^;{}]*?)\)\s*(?::[^;{}]*)?(?:const\s*)?\{/gm)) {
    let depth = 0;
    let i = m.index + m[0].length - 1;
    const start = i + 1;
    for (; i < code.length; i++) {
      const c = code[i];
      if (c === '"' || c === "'") {
        let j = i + 1;
        while (j < code.length && code[j] !== c) j += code[j] === '\\' ? 2 : 1;
        i = j;
      } else if (c === '{') {
        depth++;
      } else if (c === '}' && --depth === 0) {
        break;
      }
    }
    out.set(m[1]!, code.slice(start, i));
  }
  return out;
}

const header = stripComments(readFileSync(join(jsDir, 'request_js.h'), 'utf8'));
const requestJs = functionBodies(stripComments(readFileSync(join(jsDir, 'request_js.cc'), 'utf8')));
const contextCc = functionBodies(stripComments(readFileSync(join(jsDir, 'context.cc'), 'utf8')));

/** request_js.h's readers that take the object: with a `key` parameter, and without (fixed keys). */
function declaredReaders(): { keyed: string[]; fixed: string[] } {
  const keyed: string[] = [];
  const fixed: string[] = [];
  for (const m of header.matchAll(/\b(\w+)\(Napi::Env env, const Napi::Object &o([^)]*)\);/g)) {
    (/const char \*key\b/.test(m[2]!) ? keyed : fixed).push(m[1]!);
  }
  return { keyed: keyed.sort(), fixed: fixed.sort() };
}

/** What one C++ function body reads: key → JS type, with the helpers it calls expanded. */
function readsOf(body: string, where: string): Map<string, string> {
  const reads = new Map<string, string>();
  const add = (key: string, type: string): void => {
    const seen = reads.get(key);
    if (seen !== undefined && seen !== type) throw new Error(`${where}: "${key}" is read as ${seen} and as ${type}`);
    reads.set(key, type);
  };
  const readers = Object.keys(READER_TYPES).join('|');
  for (const m of body.matchAll(new RegExp(`\\b(${readers})\\(\\s*env\\s*,\\s*\\w+\\s*,\\s*"(\\w+)"`, 'g'))) add(m[2]!, READER_TYPES[m[1]!]!);
  for (const m of body.matchAll(/Napi::Value\s+(\w+)\s*=\s*\w+\.Get\("(\w+)"\)/g)) {
    const [, v, key] = m as unknown as [string, string, string];
    const nullable = new RegExp(`\\b${v}\\.IsNull\\(\\)`).test(body);
    const expected = new RegExp(`\\bMissingKey\\(\\s*env\\s*,\\s*"${key}"\\s*,\\s*"([^"]+)"`).exec(body)?.[1];
    let base = reads.get(key);
    if (base === undefined && expected !== undefined) base = EXPECTED_TYPES[expected];
    if (base === undefined && new RegExp(`\\bModel::Unwrap\\(\\s*${v}\\s*\\)`).test(body)) base = 'Model';
    if (base === undefined && new RegExp(`\\bmedia::ReadRequestMedia\\(\\s*env\\s*,\\s*${v}\\s*\\)`).test(body)) base = 'MediaList';
    if (base === undefined) throw new Error(`${where}: cannot tell the type of "${key}" (read with o.Get); teach test/native/request-schema.test.ts its form`);
    reads.set(key, nullable ? `${base} | null` : base);
  }
  for (const helper of declaredReaders().fixed) {
    if (!new RegExp(`\\b${helper}\\(\\s*env\\s*,`).test(body)) continue;
    const helperBody = requestJs.get(helper);
    if (helperBody === undefined) throw new Error(`request_js.cc has no body for ${helper}`);
    for (const [key, type] of readsOf(helperBody, helper)) add(key, type);
  }
  // Every quoted key handed to the object must be one of the forms above.
  for (const m of body.matchAll(/\b\w+\.Get\("(\w+)"\)|\b\w+\(\s*env\s*,\s*o\s*,\s*"(\w+)"/g)) {
    const key = (m[1] ?? m[2])!;
    if (!reads.has(key)) throw new Error(`${where}: "${key}" is read in a form this test does not know: ${m[0]}`);
  }
  return reads;
}

/** A key list's keys and wire types (a mode: the JS type of its values). */
function schemaTypes(schema: WireSchema): Map<string, string> {
  return new Map(Object.entries(schema).map(([k, v]) => [k, typeof v === 'string' ? v : typeof Object.values(v)[0]]));
}

const sorted = (m: Map<string, string>): Record<string, string> => Object.fromEntries([...m].sort(([a], [b]) => a.localeCompare(b)));

/** The string literals C++ compares the variable holding a string key with. */
function comparedValues(body: string, key: string): string[] {
  const v = new RegExp(`std::string\\s+(\\w+)\\s*=\\s*RequireString\\(\\s*env\\s*,\\s*\\w+\\s*,\\s*"${key}"\\)`).exec(body)?.[1];
  if (v === undefined) return [];
  return [...new Set([...body.matchAll(new RegExp(`\\b${v}\\s*[!=]=\\s*"(\\w+)"`, 'g'))].map((m) => m[1]!))].sort();
}

describe('the native request schema (src/native/request-schema.ts) and the C++ readers', () => {
  it('knows the type of every keyed reader request_js.h declares', () => {
    const { keyed, fixed } = declaredReaders();
    expect(keyed).toEqual(Object.keys(READER_TYPES).sort());
    expect(fixed).toEqual(['ReadDropTokens', 'ReadSampling']);
  });

  it('has a key list for every function of context.cc that reads keys', () => {
    const reading = [...contextCc].filter(([fn, body]) => readsOf(body, fn).size > 0).map(([fn]) => fn);
    expect(reading.sort()).toEqual(READERS.map((r) => r.fn).sort());
  });

  for (const { fn, schema, name } of READERS) {
    it(`${fn} reads exactly the keys of ${name}, with the same types`, () => {
      const body = contextCc.get(fn);
      expect(body, `${fn} in native/js/context.cc`).toBeDefined();
      const cpp = readsOf(body!, fn);
      const ts = schemaTypes(schema);
      const onlyCpp = [...cpp.keys()].filter((k) => !ts.has(k));
      const onlyTs = [...ts.keys()].filter((k) => !cpp.has(k));
      expect({ onlyCpp, onlyTs }, 'keys read in C++ and not listed, or listed and not read').toEqual({ onlyCpp: [], onlyTs: [] });
      expect(sorted(cpp)).toEqual(sorted(ts));
    });
  }

  it('C++ accepts exactly the values of the string modes', () => {
    expect(comparedValues(contextCc.get('Context::Context')!, 'speculative')).toEqual(Object.values(SPECULATIVE_MODES).sort());
    expect(comparedValues(contextCc.get('Context::SessionCommand')!, 'op')).toEqual(Object.values(SESSION_OPS).sort());
    // Every string mode of every list is checked above.
    const stringModes = READERS.flatMap(({ schema }) => Object.entries(schema).filter(([, v]) => typeof v === 'object' && typeof Object.values(v)[0] === 'string').map(([k]) => k));
    expect(stringModes.sort()).toEqual(['op', 'speculative']);
  });

  it('the numeric modes are llama.h\'s enums (llama_flash_attn_type, llama_pooling_type)', () => {
    const llamaH = readFileSync(join(projectRoot, 'deps', 'llama.cpp', 'include', 'llama.h'), 'utf8');
    const value = (name: string): number => {
      const m = new RegExp(`\\b${name}\\s*=\\s*(-?\\d+)`).exec(llamaH);
      if (!m) throw new Error(`llama.h has no ${name}`);
      return Number(m[1]);
    };
    expect(FLASH_ATTENTION).toEqual({ auto: value('LLAMA_FLASH_ATTN_TYPE_AUTO'), off: value('LLAMA_FLASH_ATTN_TYPE_DISABLED'), on: value('LLAMA_FLASH_ATTN_TYPE_ENABLED') });
    expect(POOLING_TYPES).toEqual({
      model: value('LLAMA_POOLING_TYPE_UNSPECIFIED'),
      mean: value('LLAMA_POOLING_TYPE_MEAN'),
      cls: value('LLAMA_POOLING_TYPE_CLS'),
      last: value('LLAMA_POOLING_TYPE_LAST'),
      rank: value('LLAMA_POOLING_TYPE_RANK'),
    });
  });
});
