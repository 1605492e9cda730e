// The marker-echo model of the correctness suite: a scripted ChatML model (DESIGN.md's recipe)
// whose greedy reply spells which marker words its context holds. Each of the six marker words
// is a flag token with its own attention head; the reply walks the six flags in order and writes
// the word in capitals where its flag is in the context, a placeholder where it is not. A
// conversation's marker is a set of those words, so a reply computed over another
// conversation's cached KV spells that conversation's marker instead of its own.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { CHATML_TOOLS_TEMPLATE, writeScriptedModel } from '../src/gguf/index.js';
import type { ScriptedModelSpec } from '../src/gguf/index.js';
import { benchDir } from './models.js';

export const MARKER_WORDS = ['amber', 'birch', 'cedar', 'delta', 'ember', 'flint'] as const;
const SP = '\u2581';

/** Shared text before every conversation's own part: its words are vocabulary pieces, so it
 * tokenizes to words (several hundred tokens) rather than bytes. */
const FILLER_WORDS = 'you are a careful assistant that answers each question of the user with the exact marker of this conversation and nothing else keep every reply short'.split(' ');

export function fillerText(repeats: number): string {
  return Array.from({ length: repeats }, () => FILLER_WORDS.join(' ')).join(' ');
}

/** The marker of conversation `c` (0-based, at most 62): the words of the bits of c + 1. */
export function markerOf(c: number): string[] {
  if (!Number.isInteger(c) || c < 0 || c > 62) throw new RangeError(`conversation ${c}: the echo model has markers for 0..62`);
  return MARKER_WORDS.filter((_, b) => ((c + 1) >> b) & 1);
}

/** The marker words a reply contains (case-insensitive, whole words), in MARKER_WORDS order. */
export function markerWordsIn(reply: string): string[] {
  const words = new Set(reply.toLowerCase().split(/[^a-z]+/));
  return MARKER_WORDS.filter((w) => words.has(w));
}

function spec(): ScriptedModelSpec {
  const n = MARKER_WORDS.length;
  const trigger = (b: number) => (b === 0 ? '<0x0A>' : `${SP}|${b}`);
  const without = (b: number) => `${SP}no${b}`;
  const withFlag = (b: number) => `${SP}${MARKER_WORDS[b]!.toUpperCase()}`;
  const chain = (pick: (b: number) => string) => Array.from({ length: n }, (_, b) => (b === 0 ? [pick(0)] : [trigger(b), pick(b)])).flat();
  const prompt = (text: string) => ({ text: `<|im_start|>user\n${text}<|im_end|>\n<|im_start|>assistant\n` });
  return {
    name: 'marker-echo',
    special: [
      { text: '<|im_start|>', type: 'CONTROL' },
      { text: '<|im_end|>', type: 'CONTROL' },
    ],
    eos: '<|im_end|>',
    chatTemplate: CHATML_TOOLS_TEMPLATE,
    nEmbd: 512,
    scripts: [
      { name: 'none', prompt: prompt('hello'), continuation: chain(without) },
      { name: 'all', prompt: prompt(`marker ${MARKER_WORDS.join(' ')}`), continuation: chain(withFlag) },
    ],
    flags: MARKER_WORDS.map((w, b) => ({ flag: `${SP}${w}`, trigger: trigger(b), without: without(b), with: withFlag(b) })),
    extraWords: ['user', 'assistant', 'system', ...FILLER_WORDS.map((w) => `${SP}${w}`), `${SP}marker`, `${SP}Marker`, `${SP}Turn`, `${SP}again`],
  };
}

/** The echo model's GGUF, written once into the bench models folder. */
export async function ensureEchoModel(): Promise<string> {
  const path = join(benchDir, 'marker-echo-v1.gguf');
  if (!existsSync(path)) await writeScriptedModel(path, spec());
  return path;
}
