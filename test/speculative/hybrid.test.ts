// Speculative decoding on hybrid memories (issue 27, item 2): for the architectures whose
// recurrent state llama.cpp can roll back (Qwen3.5's gated delta-net, LFM2's short convolutions:
// n_rs_seq snapshots of the state after each of the last decode's tokens), rejected draft cells
// leave the attention KV and the recurrent state goes back to the snapshot of the last accepted
// token. The output is the output without speculation on every path that touches the state.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { zooGreedyChain, type ZooArchitecture, type ZooModelDescription } from '../../src/gguf/index.js';
import { loadModel, type GenerateResult, type Model } from '../../src/index.js';
import { ONE_THREAD } from '../helpers/models.js';
import { zooModels } from '../helpers/zoo.js';

const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);
const ARCHS: ZooArchitecture[] = ['qwen35', 'lfm2'];
const BASE = { ...ONE_THREAD, toolCallMarkers: false, contextSize: 4096, sequences: 2 } as const;

let zoo: Record<ZooArchitecture, ZooModelDescription>;
beforeAll(async () => {
  zoo = await zooModels(ARCHS);
}, 180_000);

describe.each(ARCHS)('%s: speculation with rollback snapshots', (arch) => {
  let d: ZooModelDescription;
  let model: Model;
  beforeAll(async () => {
    d = zoo[arch];
    model = await loadModel(d.path);
  });
  afterAll(async () => {
    await model?.dispose();
  });

  /** A prompt whose tail recurs earlier, followed by the model's own chain with `corrupt` of its tokens replaced. */
  function copyingPrompt(corrupt: number[]): { prompt: number[]; chain: number[] } {
    const head = Array.from(model.tokenize(' river stone cloud garden silver window market forest', { addSpecial: false }));
    const last = head.at(-1)!;
    const chain = zooGreedyChain(d.successors, last, 60);
    const copied = chain.map((t, i) => (corrupt.includes(i) ? chain[(i + 7) % chain.length]! : t));
    return { prompt: [...head, ...copied, ...head.slice(0, 3), ...head], chain };
  }

  it('drafts, rolls back rejected drafts, and writes exactly what a context without speculation writes', async () => {
    const spec = await model.createContext({ ...BASE, speculative: 'ngram' });
    const plain = await model.createContext(BASE);
    try {
      expect(spec.settings.speculative).toBe('ngram');
      expect(spec.settings.canTruncateKv).toBe(false);
      const { prompt, chain } = copyingPrompt([9, 23, 41]);
      const o = { prompt, temperature: 0, maxTokens: 50, emitTokenIds: true } as const;
      // two at once: each sequence rolls back its own state
      const [a, b] = await Promise.all([spec.complete(o), spec.complete({ ...o, maxTokens: 37 })]);
      expect(ids(a!)).toEqual(chain.slice(0, 50));
      expect(ids(b!)).toEqual(chain.slice(0, 37));
      expect(ids(a!)).toEqual(ids(await plain.complete(o)));
      expect(a!.timings.acceptedTokens).toBeGreaterThan(20);
      expect(a!.timings.draftedTokens).toBeGreaterThan(a!.timings.acceptedTokens);
      // the same prompt again: reused from the sequence's checkpoint, its state not harmed by the rollbacks
      const again = await spec.complete(o);
      expect(ids(again)).toEqual(ids(a!));
      expect(again.reusedTokens).toBeGreaterThan(0);
    } finally {
      await spec.dispose();
      await plain.dispose();
    }
  });

  it('a session continues from a state that ended on a rolled-back draft; sampled runs with drafts match seed by seed', async () => {
    const spec = await model.createContext({ ...BASE, speculative: 'ngram' });
    const plain = await model.createContext(BASE);
    try {
      const { prompt } = copyingPrompt([5, 12, 30]);
      const turns = async (ctx: typeof spec): Promise<number[][]> => {
        const s = ctx.createSession();
        const t1 = await s.generate({ prompt, temperature: 0, maxTokens: 13, emitTokenIds: true }).result;
        const t2 = await s.continue(prompt.slice(8, 40), { temperature: 0, maxTokens: 30, emitTokenIds: true }).result;
        await s.end();
        return [ids(t1), ids(t2)];
      };
      expect(await turns(spec)).toEqual(await turns(plain));
      let drafted = 0;
      for (let seed = 1; seed <= 6; seed++) {
        const o = { prompt, temperature: 2, topK: 0, topP: 1, minP: 0, seed, maxTokens: 30, emitTokenIds: true } as const;
        const r = await spec.complete(o);
        expect(ids(r)).toEqual(ids(await plain.complete(o)));
        drafted += r.timings.draftedTokens;
      }
      expect(drafted).toBeGreaterThan(0);
    } finally {
      await spec.dispose();
      await plain.dispose();
    }
  });
});
