// Audio in prompts (issue 37): a generated qwen2a-style projector (Whisper encoder, random
// weights, src/gguf/audio-projector.ts) beside the zoo's qwen3 text model, loaded with libmtmd.
// WAV files are written by the test (test/helpers/audio.ts). A clip is keyed by its decoded
// samples: the same samples at the same place are reused (other bytes included: another
// container, extra chunks), one sample changed is not, on every cache path; a cached run's
// greedy output is a cold run's. The edges (windows, limits, bad audio) are in
// multimodal-audio.limits.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Context, type Model, type PromptPart } from '../../src/index.js';
import type { ZooModelDescription } from '../../src/gguf/index.js';
import { encodeWav, testSignal } from '../helpers/audio.js';
import { ensureAudioProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

describe('audio in prompts (zoo qwen3 + a generated qwen2a projector)', () => {
  let text: ZooModelDescription;
  let projector: Awaited<ReturnType<typeof ensureAudioProjector>>;
  let model: Model;
  let ctx: Context;
  const signalA = testSignal(1.5, 1);
  const clipA = encodeWav(signalA);
  const clipB = encodeWav(testSignal(1.5, 2)); // same length, other samples
  // clipA with one sample changed by one PCM step
  const clipA1 = (() => {
    const b = Buffer.from(clipA);
    b.writeInt16LE(b.readInt16LE(44 + 2 * 5000) + 1, 44 + 2 * 5000);
    return b;
  })();
  const prompt = (audio: Uint8Array | string, tail = ' What is said?'): PromptPart[] => [
    { type: 'text', text: 'Listen:' },
    { type: 'audio', audio },
    { type: 'text', text: tail },
  ];
  const run = (c: Context, p: PromptPart[], maxTokens = 4) =>
    c.generate({ prompt: p, maxTokens, temperature: 0, emitTokenIds: true, logprobs: 3 }).result;
  const textTokens = (s: string, addSpecial = false) => model.tokenize(s, { addSpecial, parseSpecial: false }).length;
  // what comes before the clip's embeddings, and the whole clip as the context sees it
  const head = () => textTokens('Listen:', true) + textTokens(projector.begin);
  const clipTokens = () => projector.tokensPerWindow + textTokens(projector.end);

  beforeAll(async () => {
    text = (await zooModels(['qwen3']))['qwen3'];
    projector = await ensureAudioProjector({ projectionDim: text.nEmbd });
    model = await loadModel(text.path, { projector: projector.path });
    ctx = await model.createContext({ contextSize: 2048, sequences: 2, threads: 2, toolCallMarkers: false });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('reports the audio capability and the projector\'s sample rate', () => {
    expect(model.capabilities).toEqual({ vision: false, audio: true });
    expect(model.projector?.audioSampleRate).toBe(16000);
    expect(model.mediaLimits.maxAudioSeconds).toBe(300);
  });

  it('a clip takes one 30-second window of embeddings between its markers; the cached run equals the cold one', async () => {
    const cold = await run(ctx, prompt(clipA), 6);
    expect(cold.promptTokens).toBe(head() + clipTokens() + textTokens(' What is said?'));
    expect(cold.reusedTokens).toBe(0);
    // the same clip again: everything but the last prompt token comes from the KV
    const hit = await run(ctx, prompt(clipA), 6);
    expect(hit.reusedTokens).toBe(cold.promptTokens - 1);
    expect(Array.from(hit.tokens!)).toEqual(Array.from(cold.tokens!));
    expect(hit.logprobs!.map((l) => l.logprob)).toEqual(cold.logprobs!.map((l) => l.logprob));
    // another clip of the same length: other embeddings, other logits
    const b = await run(ctx, prompt(clipB), 1);
    expect(b.promptTokens).toBe(cold.promptTokens);
    expect(b.reusedTokens).toBe(head());
    expect(b.logprobs![0]!.logprob).not.toBe(cold.logprobs![0]!.logprob);
  });

  it('live prefix keys on the decoded samples: other bytes of the same samples hit, one sample changed misses', async () => {
    const c = await model.createContext({ contextSize: 2048, sequences: 1, threads: 2, toolCallMarkers: false });
    try {
      const first = await run(c, prompt(clipA), 1);
      const upToTail = first.promptTokens - textTokens(' What is said?');
      // a LIST chunk (metadata) between fmt and data: other bytes, the same samples
      const tagged = encodeWav(signalA, { extraChunk: { id: 'LIST', body: Buffer.from('INFOISFT\x06\0\0\0llamux') } });
      expect(tagged.equals(clipA)).toBe(false);
      expect((await run(c, prompt(tagged, ' Again?'), 1)).reusedTokens).toBe(upToTail);
      // the same bytes as a data: URL
      const url = `data:audio/wav;base64,${clipA.toString('base64')}`;
      expect((await run(c, prompt(url, ' Once more?'), 1)).reusedTokens).toBe(upToTail);
      // one sample one step off: the clip's run differs from its first embedding on
      const other = await run(c, prompt(clipA1, ' Again?'), 1);
      expect(other.reusedTokens).toBe(head());
    } finally {
      await c.dispose();
    }
  });

  it('sessions, the RAM tier and prefillOnly + parentKey key on the clip', async () => {
    const c = await model.createContext({ contextSize: 2048, sequences: 1, threads: 2, cacheRamMb: 32, toolCallMarkers: false });
    try {
      // a session's next turn reuses the clip of the turn before
      const s = c.createSession();
      const t1 = await s.generate({ prompt: prompt(clipA), maxTokens: 2, temperature: 0 }).result;
      const t2 = await s.continue(' And the rest?', { maxTokens: 2, temperature: 0 }).result;
      expect(t2.reusedTokens).toBe(t1.promptTokens + t1.generatedTokens - 1);
      await s.end();
      // pushed out to the RAM tier by another prompt, restored for the same clip
      const filler: PromptPart[] = [{ type: 'text', text: 'Something else entirely, to take the only sequence.' }];
      await run(c, filler, 1);
      const restored = await run(c, prompt(clipA, ' Restored?'), 1);
      expect(restored.cache.tier).toBe('ram');
      expect(restored.reusedTokens).toBe(head() + clipTokens());
      await run(c, filler, 1);
      const changed = await run(c, prompt(clipA1, ' Restored?'), 1);
      expect(changed.reusedTokens).toBeLessThanOrEqual(head());
      // a warmed prefix with the clip, continued by its key
      const warm = await c.prefillOnly([{ type: 'text', text: 'Listen:' }, { type: 'audio', audio: clipB }, { type: 'text', text: ' Now:' }]);
      const child = await c.generate({ parentKey: warm.key, prompt: ' who speaks?', maxTokens: 2, temperature: 0 }).result;
      expect(child.reusedTokens).toBe(warm.tokens);
      expect(child.promptTokens).toBe(warm.tokens + textTokens(' who speaks?'));
    } finally {
      await c.dispose();
    }
  });

  it('n choices share the clip\'s prefill, and greedy choices equal a plain run', async () => {
    const choices = await ctx.generateChoices({ prompt: prompt(clipB, ' Choices?'), maxTokens: 3, temperature: 0, emitTokenIds: true, n: 2 });
    const [x, y] = await Promise.all(choices.map((g) => g.result));
    const plain = await run(ctx, prompt(clipB, ' Choices?'), 3);
    expect(plain.reusedTokens).toBe(plain.promptTokens - 1);
    expect(Array.from(x!.tokens!)).toEqual(Array.from(plain.tokens!));
    expect(Array.from(y!.tokens!)).toEqual(Array.from(plain.tokens!));
  });
});
