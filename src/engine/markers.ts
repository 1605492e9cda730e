// Tool-call markers: the token sequences that open and close a tool-call span in a model's
// output (and optionally a payload inside it). Strings are tokenized once, through the
// model's own vocabulary, when a context is created.
import { z } from 'zod';
import { LlamuxError } from '../errors.js';
import type { ModelHandle } from '../model/handle.js';

const markerValue = z.union([z.string().min(1), z.array(z.number().int().min(0)).min(1)]);

export const ToolCallMarkersSchema = z
  .object({
    start: markerValue,
    end: markerValue,
    /** Optional payload markers inside a span: payload text is sampled with the request's own sampler. */
    payloadStart: markerValue.optional(),
    payloadEnd: markerValue.optional(),
  })
  .strict()
  .refine((m) => (m.payloadStart === undefined) === (m.payloadEnd === undefined), {
    message: 'payloadStart and payloadEnd must be given together',
  });
export type ToolCallMarkers = z.input<typeof ToolCallMarkersSchema>;

/** Marker presets of common model families. */
export const MARKER_PRESETS = {
  /** Qwen2.5, Qwen3, Hermes 2/3 and other ChatML tool templates. */
  hermes: { start: '<tool_call>', end: '</tool_call>' },
  /** Llama 3.x built-in tool calls. */
  llama3: { start: '<|python_tag|>', end: '<|eom_id|>' },
  /** Mistral / Mixtral (v3+ tokenizers): the call list runs to the end of the turn. */
  mistral: { start: '[TOOL_CALLS]', end: '</s>' },
  /** Gemma 4 with a JSON body `{"name": …, "arguments": …}`. */
  gemma4: { start: '<|tool_call>', end: '<tool_call|>' },
  /** Qwen3-Coder, Qwen3.5, Qwen3.6: XML bodies `<function=NAME>` / `<parameter=KEY>` inside `<tool_call>`. */
  'qwen-xml': { start: '<tool_call>', end: '</tool_call>' },
  /** gpt-oss (Harmony): ` to=functions.NAME<|channel|>commentary json<|message|>{…}<|call|>` (the name is in the span). */
  harmony: { start: ' to=functions.', end: '<|call|>' },
  /** Gemma 4's native syntax `call:NAME{key:<|"|>value<|"|>,…}` (its chat template's). */
  'gemma4-native': { start: '<|tool_call>', end: '<tool_call|>' },
  /** DeepSeek V3.1+: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`. */
  deepseek: { start: '<｜tool▁call▁begin｜>', end: '<｜tool▁call▁end｜>' },
} as const satisfies Record<string, ToolCallMarkers>;
export type MarkerPresetName = keyof typeof MARKER_PRESETS;

/** Auto-detection order: a syntax that shares its markers with another (qwen-xml / hermes, gemma4-native / gemma4) is tried first. */
const DETECTION_ORDER: readonly MarkerPresetName[] = ['qwen-xml', 'harmony', 'hermes', 'llama3', 'mistral', 'gemma4-native', 'gemma4', 'deepseek'];

export const MarkerOptionSchema = z.union([
  z.literal(false),
  z.literal('auto'),
  z.enum(Object.keys(MARKER_PRESETS) as [MarkerPresetName, ...MarkerPresetName[]]),
  ToolCallMarkersSchema,
]);
export type MarkerOption = z.input<typeof MarkerOptionSchema>;

export interface ResolvedMarkers {
  preset?: MarkerPresetName;
  start: Int32Array;
  end: Int32Array;
  payloadStart?: Int32Array;
  payloadEnd?: Int32Array;
}

/** Tokenizes a marker exactly as it appears mid-output (no BOS, no SentencePiece space prefix). */
export function tokenizeMarker(model: ModelHandle, marker: string | number[]): Int32Array {
  if (Array.isArray(marker)) {
    for (const t of marker) {
      if (t >= model.vocab.size) throw new LlamuxError('INVALID_ARGUMENT', `Marker token ${t} is outside the vocabulary`);
    }
    return Int32Array.from(marker);
  }
  const direct = model.tokenize(marker, { addSpecial: false, parseSpecial: true });
  // Accept the plain tokenization only when it does not start with a space-prefixed piece
  // (SentencePiece adds "▁" at the start of text, which never matches mid-output).
  const firstPiece = direct.length > 0 ? Buffer.from(model.tokenPiece(direct[0]!, { special: true })).toString('utf8') : '';
  if (model.detokenize(direct, { special: true }) === marker && !(firstPiece.startsWith(' ') && !marker.startsWith(' '))) return direct;
  // SentencePiece vocabularies prefix a space at the start of text: tokenize after a
  // sentinel and drop the sentinel's tokens.
  const sentinel = model.tokenize('\n', { addSpecial: false, parseSpecial: true });
  const withSentinel = model.tokenize(`\n${marker}`, { addSpecial: false, parseSpecial: true });
  if (withSentinel.length > sentinel.length && sentinel.every((t, i) => withSentinel[i] === t)) {
    return withSentinel.slice(sentinel.length);
  }
  return direct;
}

function singleToken(model: ModelHandle, text: string): boolean {
  return model.tokenize(text, { addSpecial: false, parseSpecial: true }).length === 1;
}

/**
 * Picks a preset from the vocabulary and chat template: the preset whose start marker is
 * one token of this vocabulary and appears in the template. Undefined when none fits.
 */
export function detectMarkerPreset(model: ModelHandle): MarkerPresetName | undefined {
  const template = model.metadata.chatTemplate ?? '';
  for (const name of DETECTION_ORDER) {
    const start = MARKER_PRESETS[name].start as string;
    // The XML syntax shares its markers with hermes: the template's own example tells them apart.
    if (name === 'qwen-xml' && !(template.includes('<function=') && template.includes('<parameter='))) continue;
    // Gemma 4's own template writes `call:NAME{…}`: the native preset, not the JSON one.
    if (name === 'gemma4' && template.includes('call:')) continue;
    // DeepSeek R1's calls are fenced JSON after the name: not the V3.1 syntax.
    if (name === 'deepseek' && template.includes('```json')) continue;
    // Harmony's start marker is several tokens: its template's `to=functions.` and `<|call|>` choose it.
    if (name === 'harmony') {
      if (template.includes('to=') && template.includes('functions.') && template.includes('<|call|>') && singleToken(model, '<|call|>')) return name;
      continue;
    }
    if (template.includes(start) && singleToken(model, start)) return name;
  }
  return undefined;
}

export function resolveMarkers(model: ModelHandle, option: MarkerOption | undefined): ResolvedMarkers | undefined {
  if (option === false) return undefined;
  let preset: MarkerPresetName | undefined;
  let spec: ToolCallMarkers;
  if (option === undefined || option === 'auto') {
    preset = detectMarkerPreset(model);
    if (!preset) return undefined;
    spec = MARKER_PRESETS[preset];
  } else if (typeof option === 'string') {
    preset = option;
    spec = MARKER_PRESETS[option];
  } else {
    spec = option;
  }
  const out: ResolvedMarkers = { start: tokenizeMarker(model, spec.start), end: tokenizeMarker(model, spec.end) };
  if (preset) out.preset = preset;
  if (spec.payloadStart !== undefined && spec.payloadEnd !== undefined) {
    out.payloadStart = tokenizeMarker(model, spec.payloadStart);
    out.payloadEnd = tokenizeMarker(model, spec.payloadEnd);
  }
  return out;
}
