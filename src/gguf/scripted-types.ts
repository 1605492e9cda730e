// The spec and description types of scripted llama models (src/gguf/scripted.ts builds them).
import type { GgufSpec } from './types.js';
import type { SpecialTokenSpec, SpmVocab } from './vocab.js';

/** A near tie: `token` is the greedy choice, `alt` the runner-up branch, which rejoins the script after `token`. */
export interface TieStep {
  readonly token: string;
  readonly alt: readonly string[];
}

/** One script step: a piece, or a near-tie branch point. */
export type ScriptStep = string | TieStep;

/** A prompt and its scripted greedy continuation. */
export interface ScriptSpec {
  readonly name: string;
  /**
   * The prompt, as vocabulary pieces (`▁` for spaces; special tokens and `<0xNN>` allowed), or as
   * `{ text }` tokenized with the model's own vocabulary (parse_special on). Its last token
   * triggers the continuation.
   */
  readonly prompt: readonly string[] | { readonly text: string };
  /** The greedy continuation, EOS excluded (every script ends with EOS). */
  readonly continuation: readonly ScriptStep[];
}

/** Context-dependent successor: once `flag` has appeared anywhere in the context, `trigger` is followed by `with`, else by `without`. */
export interface FlagRule {
  readonly flag: string;
  readonly trigger: string;
  readonly without: string;
  readonly with: string;
}

/** Logit levels of a scripted model (defaults in parentheses). */
export interface ScriptedLogits {
  /** Logit of the scripted successor (40). */
  readonly script?: number;
  /** Logit of EOS at every token (20). */
  readonly eos?: number;
  /** Gap between a near tie's two successors (ln(0.55/0.45) ≈ 0.2007: 55 % / 45 % at temperature 1). */
  readonly tieGap?: number;
  /** Margin of a flag rule's chosen successor over the other one (20). */
  readonly flagGap?: number;
}

/** Everything {@link buildScriptedModel} needs. */
export interface ScriptedModelSpec {
  readonly name: string;
  readonly seed?: number;
  /** Special tokens (markers, chat tokens), added after the byte tokens. */
  readonly special?: readonly SpecialTokenSpec[];
  /** Extra NORMAL pieces for the vocabulary (prompt/script pieces are added automatically). */
  readonly extraWords?: readonly string[];
  /** End-of-sequence token text (default `</s>`). */
  readonly eos?: string;
  readonly scripts: readonly ScriptSpec[];
  readonly flags?: readonly FlagRule[];
  /** Stored as `tokenizer.chat_template`. */
  readonly chatTemplate?: string;
  /** Named marker texts, described with their token ids (e.g. `{ toolCallStart: '<tool_call>' }`). */
  readonly markers?: Readonly<Record<string, string>>;
  /** Hidden size; default: the smallest multiple of 64 (≥ 128) that fits the script. */
  readonly nEmbd?: number;
  /** Head size (64). */
  readonly headDim?: number;
  /** Feed-forward size (64). */
  readonly nFf?: number;
  /** `llama.context_length` (8192). */
  readonly contextLength?: number;
  readonly logits?: ScriptedLogits;
  /** Encoding of the matrix weights (output head, attention, feed-forward): quantized
   * variants run llama.cpp's quantized kernels (default F32). The embeddings stay F32. */
  readonly weightType?: 'F32' | 'F16' | 'Q8_0' | 'Q4_0';
}

/** A possible sampled continuation and its probability at temperature 1 (no other samplers). */
export interface ScriptOutcome {
  readonly tokens: readonly number[];
  readonly pieces: readonly string[];
  readonly text: string;
  readonly probability: number;
}

/** A near-tie point on the greedy path. */
export interface ScriptBranch {
  /** Index in `greedy` of the token that may be replaced by an alternative. */
  readonly index: number;
  /** The token before the branch (the last prompt token when `index` is 0). */
  readonly after: number;
  /** Choices at temperature 1, most likely first (the first is the greedy one). */
  readonly choices: ReadonlyArray<{ readonly token: number; readonly piece: string; readonly probability: number }>;
}

/** What a test needs to know about one script. */
export interface ScriptDescription {
  readonly name: string;
  /** Prompt text: tokenize with add_special (BOS) and parse_special on. */
  readonly prompt: string;
  /** The prompt's tokens, BOS first. */
  readonly promptTokens: readonly number[];
  /** The greedy continuation, EOS excluded. */
  readonly greedy: readonly number[];
  readonly greedyPieces: readonly string[];
  /** `greedy` detokenized with special tokens rendered. */
  readonly greedyText: string;
  /** The end-of-generation token greedy decoding stops at. */
  readonly stop: number;
  /** Near ties along the greedy path (empty when the script has none). */
  readonly branches: readonly ScriptBranch[];
  /** Every continuation with probability ≥ 1e-6 at temperature 1, most likely first. */
  readonly outcomes: readonly ScriptOutcome[];
  /** Whether `prompt + greedyText` tokenizes back to `promptTokens` then `greedy`. */
  readonly canonical: boolean;
}

/** What a test needs to know about a scripted model. */
export interface ScriptedModelDescription {
  readonly name: string;
  /** File path ('' until written). */
  readonly path: string;
  readonly nVocab: number;
  readonly nEmbd: number;
  readonly nHead: number;
  readonly nLayer: number;
  readonly contextLength: number;
  readonly bos: number;
  readonly eos: number;
  readonly unk: number;
  /** Token ids llama.cpp treats as end of generation. */
  readonly eog: readonly number[];
  readonly addBos: boolean;
  readonly addSpacePrefix: boolean;
  /** Id of every piece the spec mentions (prompt pieces, script pieces, special tokens, flags). */
  readonly tokens: Readonly<Record<string, number>>;
  /** Special tokens (CONTROL / USER_DEFINED) by text, with their type. */
  readonly special: Readonly<Record<string, { readonly id: number; readonly type: 'CONTROL' | 'USER_DEFINED' }>>;
  /** Named markers, with their canonical tokenization (parse_special on, no BOS). */
  readonly markers: Readonly<Record<string, { readonly text: string; readonly tokens: readonly number[] }>>;
  /** Flag rules, as ids. */
  readonly flags: ReadonlyArray<{ readonly flag: number; readonly trigger: number; readonly without: number; readonly with: number }>;
  readonly chatTemplate?: string;
  readonly scripts: Readonly<Record<string, ScriptDescription>>;
}

/** A built model: the GGUF content and its description (path empty). */
export interface BuiltScriptedModel {
  readonly gguf: GgufSpec;
  readonly description: ScriptedModelDescription;
  readonly vocab: SpmVocab;
}
