// Issue 26 with issue 27: speculative decoding verifies a draft as a batch of several rows, where
// one-token decoding feeds one row at a time. In deterministic mode the rows' logits do not depend
// on the batch, so a speculative context must give the tokens and the log-probabilities (from the
// raw logits) of a context without speculation, bit for bit, while drafts are really accepted.
// Default mode reports how many requests differed (its multi-row kernels sum in another order).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeRandomModel } from '../../src/gguf/random.js';
import { loadModel, type GenerateResult, type Model } from '../../src/index.js';

let dir: string;
let model: Model;
const report: string[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'llamux-det-spec-'));
  const path = join(dir, 'tiny-q8_0.gguf');
  await writeRandomModel(path, { preset: 'tiny', type: 'Q8_0', seed: 11 });
  model = await loadModel(path);
}, 60_000);

afterAll(async () => {
  await model?.dispose();
  rmSync(dir, { recursive: true, force: true });
  if (report.length) console.log(report.join('\n'));
});

/**
 * A prompt that repeats a phrase: n-gram drafts come from the prompt and from the output's own
 * loops. Over 512 tokens, so that default mode's one-row steps split the KV across threads while
 * a verification batch does not (the difference default mode can show).
 */
function prompt(i: number): number[] {
  const w = ['river', 'stone', 'light', 'paper', 'green', 'music', 'table', 'cloud', 'north', 'glass'];
  const phrase = Array.from({ length: 5 + (i % 4) }, (_, k) => w[(k * 3 + i) % w.length]).join(' ');
  const head = Array.from({ length: 40 }, (_, k) => `${w[(k * 7 + i) % w.length]} ${w[(k * k + i) % w.length]} ${w[(k + 2 * i) % w.length]}`).join(', ');
  return Array.from(model.tokenize(`${head}. ${phrase}. ${phrase}. ${phrase}.`, { addSpecial: false }));
}

// Deterministic mode over 20 prompts: every one must be identical. Default mode only reports how
// many differ (and that drafts were verified and kept): a few prompts show it.
describe.each([
  [true, 20],
  [false, 5],
])('speculative (n-gram) beside no speculation, deterministic: %s', (deterministic, PROMPTS) => {
  it(`${PROMPTS} prompts, 48 greedy tokens each: ${deterministic ? 'same tokens and log-probabilities' : 'drafts verified and kept'}`, async () => {
    const base = { threads: 2, batchThreads: 2, contextSize: 2048, toolCallMarkers: false, prefixCache: false, deterministic } as const;
    const plain = await model.createContext({ ...base, speculative: false });
    const spec = await model.createContext({ ...base, speculative: 'ngram' });
    try {
      const bias = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
      const o = { maxTokens: 48, temperature: 0, emitTokenIds: true, logprobs: 3, logitBias: bias } as const;
      let drafted = 0;
      let accepted = 0;
      let differ = 0;
      for (let i = 0; i < PROMPTS; i++) {
        const a: GenerateResult = await plain.complete({ prompt: prompt(i), ...o });
        const b: GenerateResult = await spec.complete({ prompt: prompt(i), ...o });
        drafted += b.timings.draftedTokens;
        accepted += b.timings.acceptedTokens;
        expect(a.timings.draftedTokens).toBe(0);
        const same = JSON.stringify(a.logprobs) === JSON.stringify(b.logprobs) && JSON.stringify(Array.from(a.tokens!)) === JSON.stringify(Array.from(b.tokens!));
        if (!same) differ++;
        if (deterministic) {
          expect(Array.from(b.tokens!), `prompt ${i}: tokens`).toEqual(Array.from(a.tokens!));
          expect(b.logprobs, `prompt ${i}: log-probabilities`).toEqual(a.logprobs);
        }
      }
      report.push(`speculative, deterministic ${deterministic}: ${differ} of ${PROMPTS} requests differ from no speculation; drafted ${drafted}, accepted ${accepted}`);
      // drafts were verified as multi-row batches, and some were kept
      expect(drafted).toBeGreaterThan(PROMPTS);
      expect(accepted).toBeGreaterThan(0);
    } finally {
      await plain.dispose();
      await spec.dispose();
    }
  }, 120_000);
});
