// Reasoning markers: the token sequences that open and close a model's reasoning span
// (`<think>` … `</think>`; Harmony's analysis channel). Tokens inside a span are reasoning
// events, apart from text. Strings are tokenized once, through the model's own vocabulary,
// when a context is created (like tool-call markers, src/engine/markers.ts).
import { z } from 'zod';
import { tokenizeMarker } from './markers.js';
import type { ModelHandle } from '../model/handle.js';

const markerValue = z.union([z.string().min(1), z.array(z.number().int().min(0)).min(1)]);

export const ReasoningMarkersSchema = z
  .object({
    start: markerValue,
    end: markerValue,
    /** Channel headers dropped from text (never shown as answer text). */
    drop: z.array(markerValue).max(16).optional(),
  })
  .strict();
export type ReasoningMarkers = z.input<typeof ReasoningMarkersSchema>;

/** Reasoning-marker presets of common model families. */
export const REASONING_PRESETS = {
  /** Qwen3, Qwen3.5/3.6, Qwen3-Coder, QwQ, DeepSeek R1/V3.1+, and other `<think>` templates. */
  think: { start: '<think>', end: '</think>' },
  /**
   * gpt-oss (Harmony): the analysis channel, up to the end of its message; the headers of the
   * other channels are dropped from text (`<|start|>assistant`, `<|channel|>final<|message|>`,
   * `<|channel|>commentary`).
   */
  harmony: { start: '<|channel|>analysis<|message|>', end: '<|end|>', drop: ['<|start|>assistant', '<|channel|>final<|message|>', '<|channel|>commentary'] },
  /** Gemma 4: the thought channel. */
  gemma4: { start: '<|channel>thought', end: '<channel|>' },
} as const satisfies Record<string, ReasoningMarkers>;
export type ReasoningPresetName = keyof typeof REASONING_PRESETS;

export const ReasoningOptionSchema = z.union([
  z.literal(false),
  z.literal('auto'),
  z.enum(Object.keys(REASONING_PRESETS) as [ReasoningPresetName, ...ReasoningPresetName[]]),
  ReasoningMarkersSchema,
]);
export type ReasoningOption = z.input<typeof ReasoningOptionSchema>;

export interface ResolvedReasoningMarkers {
  preset?: ReasoningPresetName;
  start: Int32Array;
  end: Int32Array;
  /** Channel headers dropped from text. */
  drop?: Int32Array[];
}

/**
 * Picks a reasoning preset from the chat template: the preset whose markers the template
 * writes (both of them). Undefined when none fits.
 */
export function detectReasoningPreset(model: ModelHandle): ReasoningPresetName | undefined {
  const template = model.metadata.chatTemplate ?? '';
  if (template.includes('<|channel|>') && template.includes('analysis')) return 'harmony';
  if (template.includes('<|channel>') && template.includes('<channel|>')) return 'gemma4';
  if (template.includes('<think>') && template.includes('</think>')) return 'think';
  return undefined;
}

/** The reasoning markers of a context, as token ids; undefined: no reasoning detection. */
export function resolveReasoningMarkers(model: ModelHandle, option: ReasoningOption | undefined): ResolvedReasoningMarkers | undefined {
  if (option === false) return undefined;
  let preset: ReasoningPresetName | undefined;
  let spec: ReasoningMarkers;
  if (option === undefined || option === 'auto') {
    preset = detectReasoningPreset(model);
    if (!preset) return undefined;
    spec = REASONING_PRESETS[preset];
  } else if (typeof option === 'string') {
    preset = option;
    spec = REASONING_PRESETS[option];
  } else {
    spec = option;
  }
  const out: ResolvedReasoningMarkers = { start: tokenizeMarker(model, spec.start), end: tokenizeMarker(model, spec.end) };
  if (preset) out.preset = preset;
  if ('drop' in spec && spec.drop?.length) out.drop = spec.drop.map((d) => tokenizeMarker(model, d as string | number[]));
  return out;
}

function lastIndexOf(hay: ArrayLike<number>, needle: ArrayLike<number>): number {
  outer: for (let i = hay.length - needle.length; i >= 0; i--) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

/**
 * Whether a prompt leaves a reasoning span open (a template that ends its generation prompt
 * with `<think>\n`): its last start marker has no end marker after it.
 */
export function promptOpensReasoning(prompt: ArrayLike<number>, m: ResolvedReasoningMarkers): boolean {
  const s = lastIndexOf(prompt, m.start);
  if (s < 0) return false;
  return lastIndexOf(prompt, m.end) < s;
}
