// The sampling fields the OpenAI chat and completions routes share: one schema, one mapping to
// generate options.
import { z } from 'zod';
import type { GenerateOptions } from '../options.js';
import { LoraField } from './lora.js';

export const nullable = <T extends z.ZodType>(t: T) => t.nullable().optional();

export const samplingFields = {
  temperature: nullable(z.number().min(0).max(2)),
  top_p: nullable(z.number().gt(0).max(1)),
  top_k: z.number().int().min(0).optional(),
  min_p: z.number().min(0).max(1).optional(),
  repeat_penalty: z.number().gt(0).optional(),
  frequency_penalty: nullable(z.number().min(-2).max(2)),
  presence_penalty: nullable(z.number().min(-2).max(2)),
  seed: nullable(z.number().int()),
  /** llamux: false opts this request out of the server's speculative decoding (--spec). */
  speculative: z.boolean().optional(),
  logit_bias: nullable(z.record(z.string().regex(/^\d+$/), z.number().min(-100).max(100))),
  /** llama-server's field: tokens a context shift keeps at the start (--context-shift; BOS besides); -1: the prompt. */
  n_keep: z.number().int().min(-1).max(1 << 24).optional(),
  /** llama-server's per-request LoRA scales, [{ id, scale }] (ChatService.adapters maps them). */
  lora: LoraField.optional(),
};

type SamplingBody = { [K in keyof typeof samplingFields]?: z.output<(typeof samplingFields)[K]> };

/** The generate options the sampling fields set (absent and null fields set nothing). */
export function samplingOptions(b: SamplingBody): Partial<GenerateOptions> {
  const g: Partial<GenerateOptions> = {};
  if (b.temperature != null) g.temperature = b.temperature;
  if (b.top_p != null) g.topP = b.top_p;
  if (b.top_k !== undefined) g.topK = b.top_k;
  if (b.min_p !== undefined) g.minP = b.min_p;
  if (b.repeat_penalty !== undefined) g.repeatPenalty = b.repeat_penalty;
  if (b.frequency_penalty != null) g.frequencyPenalty = b.frequency_penalty;
  if (b.presence_penalty != null) g.presencePenalty = b.presence_penalty;
  // OpenAI seeds are any integer; llama.cpp's are 32-bit
  if (b.seed != null) g.seed = ((b.seed % 2 ** 32) + 2 ** 32) % 2 ** 32;
  if (b.speculative !== undefined) g.speculative = b.speculative;
  if (b.n_keep !== undefined) g.nKeep = b.n_keep;
  if (b.logit_bias) g.logitBias = Object.fromEntries(Object.entries(b.logit_bias).map(([k, v]) => [k, v <= -100 ? -Infinity : v]));
  return g;
}
