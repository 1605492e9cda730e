// Audio in prompts (issue 37): a generated qwen2a-style projector (Whisper encoder, random
// weights, src/gguf/audio-projector.ts) beside the zoo's qwen3 text model, loaded with libmtmd.
// WAV files are written by the test (test/helpers/audio.ts). A clip is keyed by its decoded
// samples: the same samples at the same place are reused (other bytes included: another
// container, extra chunks), one sample changed is not; a cached run's greedy output is a cold
// run's; bad audio is a typed error naming the part and leaves the context working.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildChatPromptWithMedia, ChatTemplate, loadModel, type Context, type Model, type PromptPart } from '../../src/index.js';
import type { ZooModelDescription } from '../../src/gguf/index.js';
import { native } from '../../src/native/binding.js';
import { encodeWav, flacHeaderOnly, testSignal } from '../helpers/audio.js';
import { ensureAudioProjector, ensureProjector } from '../helpers/projector.js';
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
    ctx = await model.createContext({ contextSize: 4096, sequences: 2, threads: 2, toolCallMarkers: false });
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

  it('a clip takes one 30-second window of embeddings between its markers; the cached run equals a cold one', async () => {
    const cold = await model.createContext({ contextSize: 2048, sequences: 1, threads: 2, toolCallMarkers: false });
    try {
      const a = await run(ctx, prompt(clipA), 6);
      expect(a.promptTokens).toBe(head() + clipTokens() + textTokens(' What is said?'));
      expect(a.reusedTokens).toBe(0);
      // the same clip again: everything but the last prompt token comes from the KV
      const again = await run(ctx, prompt(clipA), 6);
      expect(again.reusedTokens).toBe(a.promptTokens - 1);
      const fresh = await run(cold, prompt(clipA), 6);
      expect(fresh.reusedTokens).toBe(0);
      expect(Array.from(again.tokens!)).toEqual(Array.from(fresh.tokens!));
      expect(again.logprobs!.map((l) => l.logprob)).toEqual(fresh.logprobs!.map((l) => l.logprob));
      expect(Array.from(a.tokens!)).toEqual(Array.from(fresh.tokens!));
      // another clip of the same length: other embeddings, other logits
      const b = await run(cold, prompt(clipB), 1);
      expect(b.promptTokens).toBe(a.promptTokens);
      expect(b.logprobs![0]!.logprob).not.toBe(a.logprobs![0]!.logprob);
    } finally {
      await cold.dispose();
    }
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

  it('sessions, the RAM tier, prefillOnly + parentKey and n choices key on the clip', async () => {
    const c = await model.createContext({ contextSize: 4096, sequences: 2, threads: 2, cacheRamMb: 32, toolCallMarkers: false });
    try {
      // a session's next turn reuses the clip of the turn before
      const s = c.createSession();
      const t1 = await s.generate({ prompt: prompt(clipA), maxTokens: 2, temperature: 0 }).result;
      const t2 = await s.continue(' And the rest?', { maxTokens: 2, temperature: 0 }).result;
      expect(t2.reusedTokens).toBe(t1.promptTokens + t1.generatedTokens - 1);
      await s.end();
      // pushed out to the RAM tier by two other prompts, restored for the same clip
      const filler = (i: number): PromptPart[] => [{ type: 'text', text: `Something else entirely, number ${i}, to take the sequences.` }];
      await run(c, filler(1), 1);
      await run(c, filler(2), 1);
      const restored = await run(c, prompt(clipA, ' Restored?'), 1);
      expect(restored.cache.tier).toBe('ram');
      expect(restored.reusedTokens).toBe(head() + clipTokens());
      await run(c, filler(3), 1);
      await run(c, filler(4), 1);
      const changed = await run(c, prompt(clipA1, ' Restored?'), 1);
      expect(changed.reusedTokens).toBeLessThanOrEqual(head());
      // a warmed prefix with the clip, continued by its key
      const warm = await c.prefillOnly([{ type: 'text', text: 'Listen:' }, { type: 'audio', audio: clipB }, { type: 'text', text: ' Now:' }]);
      const child = await c.generate({ parentKey: warm.key, prompt: ' who speaks?', maxTokens: 2, temperature: 0 }).result;
      expect(child.reusedTokens).toBe(warm.tokens);
      // n choices share the clip's prefill; greedy choices agree with each other and a plain run
      const choices = await c.generateChoices({ prompt: prompt(clipB, ' Choices?'), maxTokens: 3, temperature: 0, emitTokenIds: true, n: 2 });
      const [x, y] = await Promise.all(choices.map((g) => g.result));
      const plain = await run(c, prompt(clipB, ' Choices?'), 3);
      expect(Array.from(x!.tokens!)).toEqual(Array.from(plain.tokens!));
      expect(Array.from(y!.tokens!)).toEqual(Array.from(plain.tokens!));
      expect(plain.reusedTokens).toBeGreaterThanOrEqual(head() + clipTokens());
    } finally {
      await c.dispose();
    }
  });

  it('a clip over 30 s is several windows: each keyed apart, a change in the second window reuses the first', async () => {
    const long = testSignal(31, 3);
    const changed = Float32Array.from(long);
    changed[16000 * 30.5] = changed[16000 * 30.5]! + 0.25;
    const c = await model.createContext({ contextSize: 2048, sequences: 1, threads: 2, toolCallMarkers: false });
    try {
      const a = await run(c, prompt(encodeWav(long)), 1);
      expect(a.promptTokens).toBe(head() + 2 * projector.tokensPerWindow + textTokens(projector.end) + textTokens(' What is said?'));
      const b = await run(c, prompt(encodeWav(changed)), 1);
      expect(b.reusedTokens).toBe(head() + projector.tokensPerWindow);
    } finally {
      await c.dispose();
    }
  });

  it('chat messages with audio parts: the clip\'s tokens are spliced in where the template put the part', async () => {
    const template = ChatTemplate.fromModel(model);
    const messages = [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'Listen: ' }, { type: 'audio' as const, audio: clipA }, { type: 'text' as const, text: ' What is said?' }] }];
    const p = await buildChatPromptWithMedia(model, messages, { template });
    const ids = Array.from(p.tokens);
    const media = ids.filter((t) => t < 0);
    expect(media.length).toBe(projector.tokensPerWindow);
    const first = ids.findIndex((t) => t < 0);
    expect(ids.slice(first, first + media.length).every((t) => t < 0)).toBe(true);
    const again = await buildChatPromptWithMedia(model, [{ ...messages[0]!, content: [messages[0]!.content[0]!, { type: 'audio' as const, audio: `data:audio/wav;base64,${clipA.toString('base64')}` }, messages[0]!.content[2]!] }], { template });
    expect(Array.from(again.tokens)).toEqual(ids);
    const bad = [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'x' }, { type: 'audio' as const, audio: clipA.subarray(0, 100) }] }];
    await expect(buildChatPromptWithMedia(model, bad, { template })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('messages[0].content[1] (audio)') });
  });

  it('limits: maxAudioSeconds from a WAV or FLAC header before decoding, and on the decoded samples', async () => {
    const short = await loadModel(text.path, { projector: projector.path, mediaLimits: { maxAudioSeconds: 1 } });
    try {
      const c = await short.createContext({ contextSize: 1024, threads: 1, toolCallMarkers: false });
      try {
        await expect(c.generate({ prompt: prompt(clipA), maxTokens: 1 }).result).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
          message: expect.stringMatching(/Prompt part 1 \(audio\): 1\.50 s of WAV audio, over mediaLimits\.maxAudioSeconds \(1\)/),
        });
        // ten minutes declared by a FLAC header: refused without decoding anything
        await expect(c.generate({ prompt: prompt(flacHeaderOnly(44100, 44100 * 600)), maxTokens: 1 }).result).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
          message: expect.stringMatching(/Prompt part 1 \(audio\): 600\.00 s of FLAC audio/),
        });
        const ok = await c.generate({ prompt: prompt(encodeWav(testSignal(0.5, 4))), maxTokens: 1 }).result;
        expect(ok.generatedTokens).toBe(1);
      } finally {
        await c.dispose();
      }
    } finally {
      await short.dispose();
    }
    // the native bound on what was decoded (MP3 headers do not say how long they are)
    await expect(native.tokenizeMedia(model.nativeHandle(), ['x', clipA, 'y'], false, false, 1e9, 1.25)).rejects.toMatchObject({
      part: 1,
      message: expect.stringContaining('1.50 s of audio, over mediaLimits.maxAudioSeconds (1.25)'),
    });
  });

  it('bad audio: typed errors naming the part, and the context keeps working', async () => {
    const bad = (audio: Uint8Array | string) => run(ctx, prompt(audio), 1);
    const named = (re: RegExp) => ({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(re) });
    // the header declares more samples than the file holds
    await expect(bad(clipA.subarray(0, clipA.length - 1000))).rejects.toMatchObject(named(/Prompt part 1 \(audio\): truncated: the WAV header declares/));
    await expect(bad(clipA.subarray(0, 30))).rejects.toMatchObject(named(/Prompt part 1 \(audio\): truncated/));
    // ADPCM (format 2) is not decoded
    await expect(bad(encodeWav(signalA, { formatTag: 2 }))).rejects.toMatchObject(named(/Prompt part 1 \(audio\): WAV sample format 2/));
    // an MP3 by its first bytes, garbage after them: the decoder refuses it
    await expect(bad(Buffer.concat([Buffer.from('ID3'), Buffer.alloc(400, 0x41)]))).rejects.toMatchObject(named(/Prompt part 1 \(audio\): could not be decoded/));
    await expect(bad(Buffer.from('OggS not a format this build reads'))).rejects.toMatchObject(named(/Prompt part 1 \(audio\): unsupported format/));
    await expect(bad('data:audio/wav;base64,@@@')).rejects.toMatchObject(named(/base64/));
    // audio where an image part is expected
    await expect(run(ctx, [{ type: 'text', text: 'x' }, { type: 'image', image: clipA }, { type: 'text', text: 'y' }], 1)).rejects.toMatchObject(named(/Prompt part 1 \(image\): the bytes are WAV audio, not image/));
    const ok = await run(ctx, prompt(clipB), 2);
    expect(ok.generatedTokens).toBe(2);
  });

  it('a projector without an audio encoder refuses audio with UNSUPPORTED', async () => {
    const vision = await ensureProjector({ projectionDim: text.nEmbd });
    const m = await loadModel(text.path, { projector: vision.path });
    try {
      expect(m.capabilities).toEqual({ vision: true, audio: false });
      const c = await m.createContext({ contextSize: 512, threads: 1, toolCallMarkers: false });
      try {
        await expect(c.generate({ prompt: prompt(clipA), maxTokens: 1 }).result).rejects.toMatchObject({ code: 'UNSUPPORTED', message: expect.stringContaining('Prompt part 1 (audio): this model\'s projector reads no audio') });
      } finally {
        await c.dispose();
      }
    } finally {
      await m.dispose();
    }
  });
});
