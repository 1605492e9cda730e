// Audio in prompts (issue 37), the edges: clips longer than one 30-second Whisper window, chat
// messages with audio parts, mediaLimits.maxAudioSeconds (from the header before decoding, and
// on the decoded samples), bad audio as typed errors naming the part, and a projector without
// an audio encoder. Zoo qwen3 with the generated qwen2a projector, WAV files written here.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildChatPromptWithMedia, ChatTemplate, loadModel, type Context, type Model, type PromptPart } from '../../src/index.js';
import type { ZooModelDescription } from '../../src/gguf/index.js';
import { native } from '../../src/native/binding.js';
import { encodeWav, flacHeaderOnly, testSignal } from '../helpers/audio.js';
import { ensureAudioProjector, ensureProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

describe('audio in prompts: windows, chat, limits, bad audio (zoo qwen3 + a generated qwen2a projector)', () => {
  let text: ZooModelDescription;
  let projector: Awaited<ReturnType<typeof ensureAudioProjector>>;
  let model: Model;
  let ctx: Context;
  const signalA = testSignal(1.5, 1);
  const clipA = encodeWav(signalA);
  const clipB = encodeWav(testSignal(1.5, 2));
  const prompt = (audio: Uint8Array | string, tail = ' What is said?'): PromptPart[] => [
    { type: 'text', text: 'Listen:' },
    { type: 'audio', audio },
    { type: 'text', text: tail },
  ];
  const run = (c: Context, p: PromptPart[], maxTokens = 4) =>
    c.generate({ prompt: p, maxTokens, temperature: 0, emitTokenIds: true, logprobs: 3 }).result;
  const textTokens = (s: string, addSpecial = false) => model.tokenize(s, { addSpecial, parseSpecial: false }).length;
  const head = () => textTokens('Listen:', true) + textTokens(projector.begin);

  beforeAll(async () => {
    text = (await zooModels(['qwen3']))['qwen3'];
    projector = await ensureAudioProjector({ projectionDim: text.nEmbd });
    model = await loadModel(text.path, { projector: projector.path });
    ctx = await model.createContext({ contextSize: 2048, sequences: 1, threads: 2, toolCallMarkers: false });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('a clip over 30 s is one run per window, each keyed apart; a change anywhere misses from the first window on', async () => {
    const long = testSignal(31, 3);
    const wav = encodeWav(long);
    const r = await native.tokenizeMedia(model.nativeHandle(), ['Listen:', wav, ' What is said?'], true, false, 1e9, 300);
    // two runs of a window each, back to back between the clip's markers
    expect(r.runs).toEqual([head(), projector.tokensPerWindow, head() + projector.tokensPerWindow, projector.tokensPerWindow]);
    const first = Array.from(r.tokens.subarray(head(), head() + projector.tokensPerWindow));
    const second = Array.from(r.tokens.subarray(head() + projector.tokensPerWindow, head() + 2 * projector.tokensPerWindow));
    expect(first.every((t) => t < 0) && second.every((t) => t < 0)).toBe(true);
    expect(second.filter((t, i) => t === first[i]).length).toBe(0);
    const a = await run(ctx, prompt(wav), 1);
    expect(a.promptTokens).toBe(r.tokens.length);
    // Whisper's log-mel is normalized by the clip's peak: a sample in the second window can move
    // the first window's features, so the whole clip is one key (a partial hit could be false)
    const changed = Float32Array.from(long);
    changed[16000 * 30.5] = changed[16000 * 30.5]! + 0.25;
    const b = await run(ctx, prompt(encodeWav(changed)), 1);
    expect(b.reusedTokens).toBe(head());
  });

  it('the key is the decoded samples: 16-bit, float and stereo files of the same samples are the same tokens; other rates are resampled', async () => {
    const tokens = async (wav: Buffer) => Array.from((await native.tokenizeMedia(model.nativeHandle(), ['Listen:', wav, ' What?'], true, false, 1e9, 300)).tokens);
    const pcm = encodeWav(signalA);
    // the values the decoder makes of the 16-bit samples (s / 32768), written as floats, and as two equal channels
    const decoded = Float32Array.from({ length: signalA.length }, (_, i) => pcm.readInt16LE(44 + 2 * i) / 32768);
    const asFloat = encodeWav(decoded, { encoding: 'float32' });
    const stereo = encodeWav(Float32Array.from({ length: 2 * decoded.length }, (_, i) => decoded[i >> 1]!), { encoding: 'float32', channels: 2 });
    const want = await tokens(pcm);
    expect(await tokens(asFloat)).toEqual(want);
    expect(await tokens(stereo)).toEqual(want);
    // one sample a float step away from its 16-bit value: another clip
    decoded[100] = decoded[100]! + 2 ** -20;
    const nudged = await tokens(encodeWav(decoded, { encoding: 'float32' }));
    expect(nudged.length).toBe(want.length);
    expect(nudged).not.toEqual(want);
    // 44.1 kHz, resampled to the projector's 16 kHz: one window like any clip under 30 s
    const cd = await tokens(encodeWav(testSignal(1.5, 1, 44100), { rate: 44100 }));
    expect(cd.length).toBe(want.length);
    expect(cd).not.toEqual(want);
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
    await expect(bad(clipA.subarray(0, 30))).rejects.toMatchObject(named(/Prompt part 1 \(audio\): the WAV fmt chunk is truncated/));
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
