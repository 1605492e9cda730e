import { TokenType } from './constants.js';
import type { TokenTypeName } from './constants.js';
import { val } from './types.js';
import type { GgufValue } from './types.js';

/** SentencePiece's space marker, U+2581. */
export const SPACE = '\u2581';

/** One vocabulary entry. */
export interface VocabEntry {
  readonly text: string;
  readonly type: TokenTypeName;
  readonly score: number;
}

/** A token added on top of the base vocabulary (markers, chat tokens). */
export interface SpecialTokenSpec {
  readonly text: string;
  /** CONTROL tokens are parsed from text only with `parseSpecial`; USER_DEFINED always are. */
  readonly type: 'CONTROL' | 'USER_DEFINED';
}

/** Options of {@link buildSpmVocab}. */
export interface SpmVocabOptions {
  /** Added after the byte tokens, in this order. */
  readonly special?: readonly SpecialTokenSpec[];
  /** NORMAL pieces (use `▁` for spaces), in this order, after the special tokens. */
  readonly words: readonly string[];
  /**
   * Also add every prefix of every word (after all words), so llama.cpp's SentencePiece merge
   * loop can build each word from its characters. Default true.
   */
  readonly prefixClosure?: boolean;
  /** Text of the end-of-sequence token; default `</s>`. It must be in the vocabulary. */
  readonly eos?: string;
  /** `tokenizer.ggml.add_space_prefix`; default false (text round-trips exactly). */
  readonly addSpacePrefix?: boolean;
  /** `tokenizer.ggml.add_bos_token`; default true. */
  readonly addBos?: boolean;
  /** Pad the vocabulary with `<unused{i}>` (UNUSED) tokens to at least this size. */
  readonly minSize?: number;
}

/** Options of {@link SpmVocab.tokenize}. */
export interface TokenizeOptions {
  /** Prepend BOS when the vocabulary says so. Default true. */
  readonly addSpecial?: boolean;
  /** Match CONTROL token texts in the input. Default true. */
  readonly parseSpecial?: boolean;
}

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { ignoreBOM: true });

function byteToken(b: number): string {
  return `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;
}

/**
 * A SentencePiece ("llama") vocabulary: `<unk>`, `<s>`, `</s>`, the 256 `<0xNN>` byte tokens,
 * the special tokens, then NORMAL pieces. Tokenizes exactly as llama.cpp's SPM tokenizer
 * (special-token partition, score-ordered bigram merges, byte fallback), which lets the
 * builders check that prompts tokenize to the intended pieces.
 */
export class SpmVocab {
  readonly entries: readonly VocabEntry[];
  readonly bos: number;
  readonly eos: number;
  readonly unk: number;
  readonly addSpacePrefix: boolean;
  readonly addBos: boolean;
  readonly #ids: Map<string, number>;
  readonly #special: number[];
  readonly #bytes: Int32Array;

  constructor(
    entries: readonly VocabEntry[],
    ids: { readonly bos?: number; readonly eos: number; readonly unk?: number; readonly addSpacePrefix: boolean; readonly addBos: boolean },
  ) {
    this.entries = entries;
    this.bos = ids.bos ?? 1;
    this.eos = ids.eos;
    this.unk = ids.unk ?? 0;
    this.addSpacePrefix = ids.addSpacePrefix;
    this.addBos = ids.addBos;
    this.#ids = new Map();
    this.#bytes = new Int32Array(256).fill(-1);
    entries.forEach((e, i) => {
      if (this.#ids.has(e.text)) throw new RangeError(`Duplicate vocabulary entry "${e.text}"`);
      this.#ids.set(e.text, i);
      if (e.type === 'BYTE' && /^<0x[0-9A-Fa-f]{2}>$/.test(e.text)) this.#bytes[parseInt(e.text.slice(3, 5), 16)] = i;
    });
    this.#special = entries
      .map((e, i) => ({ e, i }))
      .filter(({ e }) => e.type === 'CONTROL' || e.type === 'USER_DEFINED' || e.type === 'UNKNOWN')
      .sort((a, b) => utf8.encode(b.e.text).length - utf8.encode(a.e.text).length || a.i - b.i)
      .map(({ i }) => i);
  }

  get size(): number {
    return this.entries.length;
  }

  /** Id of a piece, or undefined. */
  find(text: string): number | undefined {
    return this.#ids.get(text);
  }

  /** Id of a piece; throws when missing. */
  id(text: string): number {
    const id = this.#ids.get(text);
    if (id === undefined) throw new RangeError(`Token "${text}" is not in the vocabulary`);
    return id;
  }

  /** Id of the byte token for `b` (the unknown token when the vocabulary has none). */
  byteId(b: number): number {
    const id = this.#bytes[b]!;
    return id >= 0 ? id : this.unk;
  }

  /** The piece text of `id` as stored in the vocabulary. */
  piece(id: number): string {
    const e = this.entries[id];
    if (e === undefined) throw new RangeError(`Token id ${id} is out of range`);
    return e.text;
  }

  /** Tokenizes like `llama_tokenize(vocab, text, add_special, parse_special)`. */
  tokenize(text: string, options?: TokenizeOptions): number[] {
    const addSpecial = options?.addSpecial ?? true;
    const parseSpecial = options?.parseSpecial ?? true;
    type Fragment = { text: string } | { token: number };
    let fragments: Fragment[] = [{ text }];
    for (const id of this.#special) {
      const e = this.entries[id]!;
      if (!parseSpecial && (e.type === 'CONTROL' || e.type === 'UNKNOWN')) continue;
      const next: Fragment[] = [];
      for (const f of fragments) {
        if (!('text' in f)) {
          next.push(f);
          continue;
        }
        let rest = f.text;
        for (;;) {
          const at = rest.indexOf(e.text);
          if (at < 0) break;
          if (at > 0) next.push({ text: rest.slice(0, at) });
          next.push({ token: id });
          rest = rest.slice(at + e.text.length);
        }
        if (rest.length > 0) next.push({ text: rest });
      }
      fragments = next;
    }
    const out: number[] = [];
    if (addSpecial && this.addBos) out.push(this.bos);
    let prevSpecial = true;
    for (const f of fragments) {
      if ('token' in f) {
        out.push(f.token);
        prevSpecial = true;
        continue;
      }
      const raw = (this.addSpacePrefix && prevSpecial ? ' ' : '') + f.text;
      this.#spm(raw.replaceAll(' ', SPACE), out);
      prevSpecial = false;
    }
    return out;
  }

  /** llama.cpp's `llm_tokenizer_spm_session::tokenize` on already-escaped text. */
  #spm(text: string, out: number[]): void {
    const chars = Array.from(text); // UTF-8 characters
    const n = chars.length;
    if (n === 0) return;
    const sym = chars.map((c, i) => ({ text: c, prev: i - 1, next: i + 1 < n ? i + 1 : -1 }));
    // Max-heap of bigrams: higher score first, then lower left index (llm_bigram_spm::comparator).
    type Bigram = { left: number; right: number; score: number; size: number };
    const heap: Bigram[] = [];
    const before = (a: Bigram, b: Bigram): boolean => a.score > b.score || (a.score === b.score && a.left < b.left);
    const push = (b: Bigram): void => {
      heap.push(b);
      let i = heap.length - 1;
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (!before(heap[i]!, heap[p]!)) break;
        [heap[i], heap[p]] = [heap[p]!, heap[i]!];
        i = p;
      }
    };
    const pop = (): Bigram => {
      const top = heap[0]!;
      const last = heap.pop()!;
      if (heap.length > 0) {
        heap[0] = last;
        let i = 0;
        for (;;) {
          const l = 2 * i + 1;
          const r = l + 1;
          let m = i;
          if (l < heap.length && before(heap[l]!, heap[m]!)) m = l;
          if (r < heap.length && before(heap[r]!, heap[m]!)) m = r;
          if (m === i) break;
          [heap[i], heap[m]] = [heap[m]!, heap[i]!];
          i = m;
        }
      }
      return top;
    };
    const tryAdd = (left: number, right: number): void => {
      if (left < 0 || right < 0) return;
      const joined = sym[left]!.text + sym[right]!.text;
      const id = this.#ids.get(joined);
      if (id === undefined) return;
      push({ left, right, score: this.entries[id]!.score, size: joined.length });
    };
    for (let i = 1; i < n; i++) tryAdd(i - 1, i);
    while (heap.length > 0) {
      const b = pop();
      const l = sym[b.left]!;
      const r = sym[b.right]!;
      if (l.text.length === 0 || r.text.length === 0 || l.text.length + r.text.length !== b.size) continue;
      l.text += r.text;
      r.text = '';
      l.next = r.next;
      if (r.next >= 0) sym[r.next]!.prev = b.left;
      tryAdd(l.prev, b.left);
      tryAdd(b.left, l.next);
    }
    // Every merged symbol is a vocabulary piece; leftover characters fall back to byte tokens.
    for (let i = 0; i !== -1; i = sym[i]!.next) {
      const s = sym[i]!.text;
      const id = this.#ids.get(s);
      if (id !== undefined) out.push(id);
      else for (const byte of utf8.encode(s)) out.push(this.byteId(byte));
    }
  }

  /** Piece bytes as `llama_token_to_piece(vocab, id, …, special)` gives them. */
  pieceBytes(id: number, special = true): Uint8Array {
    const e = this.entries[id];
    if (e === undefined) throw new RangeError(`Token id ${id} is out of range`);
    switch (e.type) {
      case 'CONTROL':
      case 'UNKNOWN':
        return special ? utf8.encode(e.text) : new Uint8Array(0);
      case 'USER_DEFINED':
        return utf8.encode(e.text);
      case 'BYTE':
        return Uint8Array.of(parseInt(e.text.slice(3, 5), 16));
      case 'NORMAL':
        return utf8.encode(e.text.replaceAll(SPACE, ' '));
      default:
        return new Uint8Array(0);
    }
  }

  /**
   * Concatenates the pieces' bytes and decodes UTF-8, like `llama_detokenize(…, remove_special
   * false, unparse_special = special)`: with `add_space_prefix`, the first piece loses one
   * leading space.
   */
  detokenize(ids: readonly number[], special = true): string {
    const parts = ids.map((id) => this.pieceBytes(id, special));
    if (this.addSpacePrefix && parts.length > 0 && parts[0]![0] === 0x20) parts[0] = parts[0]!.subarray(1);
    const total = parts.reduce((n, p) => n + p.length, 0);
    const buf = new Uint8Array(total);
    let o = 0;
    for (const p of parts) {
      buf.set(p, o);
      o += p.length;
    }
    return utf8Decoder.decode(buf);
  }

  /** The `tokenizer.*` metadata llama.cpp needs for this vocabulary. */
  metadata(): Array<[string, GgufValue]> {
    return [
      ['tokenizer.ggml.model', val.string('llama')],
      ['tokenizer.ggml.tokens', val.array('string', this.entries.map((e) => e.text))],
      ['tokenizer.ggml.scores', val.array('f32', this.entries.map((e) => e.score))],
      ['tokenizer.ggml.token_type', val.array('i32', this.entries.map((e) => TokenType[e.type]))],
      ['tokenizer.ggml.bos_token_id', val.u32(this.bos)],
      ['tokenizer.ggml.eos_token_id', val.u32(this.eos)],
      ['tokenizer.ggml.unknown_token_id', val.u32(this.unk)],
      ['tokenizer.ggml.add_bos_token', val.bool(this.addBos)],
      ['tokenizer.ggml.add_eos_token', val.bool(false)],
      ['tokenizer.ggml.add_space_prefix', val.bool(this.addSpacePrefix)],
    ];
  }
}

/**
 * Builds a SentencePiece vocabulary: `<unk>` (0), `<s>` (1), `</s>` (2), `<0x00>`…`<0xFF>`
 * (3…258), then `special`, then `words` and (by default) every prefix of every word.
 * NORMAL pieces get descending scores in order, so earlier pieces merge first.
 *
 * @throws RangeError for duplicate pieces or an unknown `eos`.
 */
export function buildSpmVocab(options: SpmVocabOptions): SpmVocab {
  const entries: VocabEntry[] = [
    { text: '<unk>', type: 'UNKNOWN', score: 0 },
    { text: '<s>', type: 'CONTROL', score: 0 },
    { text: '</s>', type: 'CONTROL', score: 0 },
  ];
  for (let b = 0; b < 256; b++) entries.push({ text: byteToken(b), type: 'BYTE', score: 0 });
  const seen = new Set(entries.map((e) => e.text));
  for (const s of options.special ?? []) {
    if (seen.has(s.text)) throw new RangeError(`Duplicate special token "${s.text}"`);
    seen.add(s.text);
    entries.push({ text: s.text, type: s.type, score: 0 });
  }
  const normal: string[] = [];
  const addNormal = (w: string): void => {
    if (seen.has(w)) return;
    seen.add(w);
    normal.push(w);
  };
  for (const w of options.words) {
    if (w.length === 0) throw new RangeError('Expected non-empty word pieces');
    addNormal(w);
  }
  if (options.prefixClosure ?? true) {
    for (const w of options.words) {
      const cps = Array.from(w);
      for (let n = 1; n < cps.length; n++) addNormal(cps.slice(0, n).join(''));
    }
  }
  normal.forEach((w, i) => entries.push({ text: w, type: 'NORMAL', score: -i }));
  const minSize = options.minSize ?? 0;
  for (let i = 0; entries.length < minSize; i++) {
    const text = `<unused${i}>`;
    if (!seen.has(text)) entries.push({ text, type: 'UNUSED', score: 0 });
  }
  const eosText = options.eos ?? '</s>';
  const eos = entries.findIndex((e) => e.text === eosText);
  if (eos < 0) throw new RangeError(`EOS token "${eosText}" is not in the vocabulary`);
  return new SpmVocab(entries, { eos, addSpacePrefix: options.addSpacePrefix ?? false, addBos: options.addBos ?? true });
}

/**
 * Splits `text` into pieces at `|` and turns spaces into `▁`:
 * `sp('I| will| check')` → `['I', '▁will', '▁check']`. A literal `|` cannot be written.
 */
export function sp(text: string): string[] {
  return text
    .split('|')
    .filter((p) => p.length > 0)
    .map((p) => p.replaceAll(' ', SPACE));
}

const TYPE_BY_ID = new Map<number, TokenTypeName>(Object.entries(TokenType).map(([k, v]) => [v, k as TokenTypeName]));

/**
 * The SentencePiece vocabulary stored in GGUF metadata (`tokenizer.ggml.model` = `llama`), e.g.
 * from {@link readGgufFile}. Defaults follow llama.cpp (BOS 1, EOS 2, UNK 0, add BOS, add space
 * prefix).
 *
 * @throws RangeError when the metadata has no SentencePiece vocabulary.
 */
export function spmVocabFromMetadata(metadata: ReadonlyMap<string, GgufValue>): SpmVocab {
  const model = metadata.get('tokenizer.ggml.model');
  if (model?.value !== 'llama') throw new RangeError('Expected tokenizer.ggml.model to be "llama"');
  const tokens = metadata.get('tokenizer.ggml.tokens');
  if (tokens?.type !== 'array' || tokens.itemType !== 'string') throw new RangeError('Expected tokenizer.ggml.tokens to be an array of strings');
  const scores = metadata.get('tokenizer.ggml.scores');
  const types = metadata.get('tokenizer.ggml.token_type');
  const num = (key: string, fallback: number): number => {
    const v = metadata.get(key)?.value;
    return typeof v === 'number' ? v : fallback;
  };
  const flag = (key: string, fallback: boolean): boolean => {
    const v = metadata.get(key)?.value;
    return typeof v === 'boolean' ? v : fallback;
  };
  const entries = tokens.value.map((text, i): VocabEntry => {
    const score = scores?.type === 'array' ? Number(scores.value[i] ?? 0) : 0;
    const typeId = types?.type === 'array' ? Number(types.value[i] ?? TokenType.NORMAL) : TokenType.NORMAL;
    return { text, score, type: TYPE_BY_ID.get(typeId) ?? 'NORMAL' };
  });
  return new SpmVocab(entries, {
    bos: num('tokenizer.ggml.bos_token_id', 1),
    eos: num('tokenizer.ggml.eos_token_id', 2),
    unk: num('tokenizer.ggml.unknown_token_id', 0),
    addSpacePrefix: flag('tokenizer.ggml.add_space_prefix', true),
    addBos: flag('tokenizer.ggml.add_bos_token', true),
  });
}

/** Pieces for a sentence: words split at spaces, each later word prefixed with `▁`. */
export function words(text: string): string[] {
  return text
    .split(' ')
    .filter((w) => w.length > 0)
    .map((w, i) => (i === 0 ? w : SPACE + w));
}
