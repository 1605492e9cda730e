// Images in prompts (issue 37): a generated gemma3-style projector (random weights, written by
// src/gguf/projector.ts) beside the zoo's qwen3 text model, loaded with libmtmd. The caches key
// on the image's pixels: the same image at the same place is reused, another image of the same
// size is not, and a cached run's greedy output is the cold run's.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildChatPrompt, buildChatPromptWithMedia, ChatTemplate, loadModel, type Context, type Model, type PromptPart } from '../../src/index.js';
import type { ZooModelDescription } from '../../src/gguf/index.js';
import { encodePng, patternPng, pngHeaderOnly } from '../helpers/images.js';
import { ensureProjector } from '../helpers/projector.js';
import { projectRoot } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

const scratch = join(projectRoot, '.cache', 'mmproj');

describe('images in prompts (zoo qwen3 + a generated gemma3 projector)', () => {
  let text: ZooModelDescription;
  let projector: Awaited<ReturnType<typeof ensureProjector>>;
  let model: Model;
  let ctx: Context;
  const imageA = patternPng(48, 40, 1);
  const imageB = patternPng(48, 40, 2); // same size, other pixels
  // imageA with one pixel changed
  const imageA1 = encodePng(48, 40, (x, y) => {
    const h = Math.imul(x * 73856093 ^ y * 19349663 ^ 1 * 83492791, 0x9e3779b1) >>> 0;
    return x === 17 && y === 9 ? [0, 0, 0] : [h & 0xff, (h >>> 8) & 0xff, (h >>> 16) & 0xff];
  });
  const prompt = (image: Uint8Array | string, tail = ' What is in it?'): PromptPart[] => [
    { type: 'text', text: 'Look at this picture:' },
    { type: 'image', image },
    { type: 'text', text: tail },
  ];
  const run = (c: Context, p: PromptPart[], maxTokens = 6) =>
    c.generate({ prompt: p, maxTokens, temperature: 0, emitTokenIds: true, logprobs: 3 }).result;
  const textTokens = (s: string, addSpecial = false) => model.tokenize(s, { addSpecial, parseSpecial: false }).length;

  beforeAll(async () => {
    text = (await zooModels(['qwen3']))['qwen3'];
    projector = await ensureProjector({ projectionDim: text.nEmbd });
    model = await loadModel(text.path, { projector: projector.path });
    ctx = await model.createContext({ contextSize: 512, sequences: 2, threads: 2, toolCallMarkers: false });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('reports the projector\'s capabilities', async () => {
    expect(model.capabilities).toEqual({ vision: true, audio: false });
    expect(model.projector?.path).toBe(projector.path);
    expect(model.projector?.mrope).toBe(false); // qwen3 ropes with NEOX: one position per embedding
    const plain = await loadModel(text.path);
    try {
      expect(plain.capabilities).toEqual({ vision: false, audio: false });
      const c = await plain.createContext({ contextSize: 256, threads: 1, toolCallMarkers: false });
      try {
        await expect(c.generate({ prompt: prompt(imageA), maxTokens: 1 }).result).rejects.toMatchObject({ code: 'UNSUPPORTED' });
      } finally {
        await c.dispose();
      }
    } finally {
      await plain.dispose();
    }
  });

  it('refuses a missing, corrupt, foreign or mismatched projector with typed errors', async () => {
    await expect(loadModel(text.path, { projector: join(scratch, 'no-such-mmproj.gguf') })).rejects.toMatchObject({ code: 'MODEL_NOT_FOUND' });
    const corrupt = join(scratch, 'corrupt-mmproj.gguf');
    await writeFile(corrupt, Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(64, 0x5a)]));
    await expect(loadModel(text.path, { projector: corrupt })).rejects.toMatchObject({ code: 'MODEL_INVALID', message: expect.stringContaining('not a GGUF') });
    // the text model itself is a GGUF, but no projector
    await expect(loadModel(text.path, { projector: text.path })).rejects.toMatchObject({ code: 'MODEL_INVALID', message: expect.stringContaining('not a multimodal projector') });
    // a projector made for a text model 32 wide
    const narrow = await ensureProjector({ projectionDim: 32 });
    await expect(loadModel(text.path, { projector: narrow.path })).rejects.toMatchObject({ code: 'MODEL_INVALID', message: expect.stringContaining('n_embd') });
  });

  it('runs an image prompt: the image takes its embeddings\' positions, and the model sees it', async () => {
    const a = await run(ctx, prompt(imageA));
    const expected = textTokens('Look at this picture:', true) + textTokens('<start_of_image>') + projector.tokensPerImage + textTokens('<end_of_image>') + textTokens(' What is in it?');
    expect(a.promptTokens).toBe(expected);
    expect(a.generatedTokens).toBe(6);
    // another image at the same place: other embeddings, so other logits for the first token
    const b = await run(ctx, prompt(imageB));
    expect(b.promptTokens).toBe(a.promptTokens);
    expect(b.logprobs![0]!.logprob).not.toBe(a.logprobs![0]!.logprob);
  });

  it('live prefix: the same image is a hit, another image of the same size (one pixel apart) a miss', async () => {
    const c = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, toolCallMarkers: false });
    try {
      const cold = await run(c, prompt(imageA));
      expect(cold.reusedTokens).toBe(0);
      const again = await run(c, prompt(imageA, ' Describe it.'));
      const beforeTail = cold.promptTokens - textTokens(' What is in it?');
      // everything up to the tail is reused: the image's run is not encoded or decoded again
      expect(again.reusedTokens).toBe(beforeTail);
      const other = await run(c, prompt(imageA1, ' Describe it.'));
      const beforeImage = textTokens('Look at this picture:', true) + textTokens('<start_of_image>');
      expect(other.reusedTokens).toBe(beforeImage);
      // and the data: URL of the same bytes is the same image
      const url = `data:image/png;base64,${imageA1.toString('base64')}`;
      const same = await run(c, prompt(url, ' Describe it.'));
      expect(same.reusedTokens).toBe(same.promptTokens - 1);
    } finally {
      await c.dispose();
    }
  });

  it('greedy output of a cached image prompt equals a cold run\'s', async () => {
    const warm = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, toolCallMarkers: false });
    const cold = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, toolCallMarkers: false });
    try {
      await run(warm, prompt(imageB, ' First.'));
      const hit = await run(warm, prompt(imageB), 8);
      expect(hit.reusedTokens).toBeGreaterThan(projector.tokensPerImage);
      const fresh = await run(cold, prompt(imageB), 8);
      expect(fresh.reusedTokens).toBe(0);
      expect(Array.from(hit.tokens!)).toEqual(Array.from(fresh.tokens!));
      expect(hit.logprobs!.map((l) => l.logprob)).toEqual(fresh.logprobs!.map((l) => l.logprob));
    } finally {
      await warm.dispose();
      await cold.dispose();
    }
  });

  it('sessions: each later turn reuses the earlier turns and their images (only its own text and image are prefilled)', async () => {
    const c = await model.createContext({ contextSize: 512, sequences: 2, threads: 2, toolCallMarkers: false });
    try {
      const s = c.createSession();
      const t1 = await s.generate({ prompt: prompt(imageA), maxTokens: 3, temperature: 0 }).result;
      expect(t1.reusedTokens).toBe(0);
      const t2 = await s.continue([{ type: 'text', text: ' And this one:' }, { type: 'image', image: imageB }, { type: 'text', text: ' Same?' }], { maxTokens: 3, temperature: 0 }).result;
      // the committed turn, but for its last sampled token (never decoded)
      expect(t2.reusedTokens).toBe(t1.promptTokens + t1.generatedTokens - 1);
      const t3 = await s.continue(' Thanks.', { maxTokens: 2, temperature: 0 }).result;
      expect(t3.reusedTokens).toBe(t2.promptTokens + t2.generatedTokens - 1);
    } finally {
      await c.dispose();
    }
  });

  it('RAM tier and prefillOnly + parentKey key on the image too', async () => {
    const c = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, cacheRamMb: 16, toolCallMarkers: false });
    try {
      const first = await run(c, prompt(imageA), 2);
      await run(c, [{ type: 'text', text: 'Something else entirely, to take the only sequence.' }], 2); // imageA's state moves to the RAM tier
      const same = await run(c, prompt(imageA, ' Describe it.'), 2);
      expect(same.cache.tier).toBe('ram');
      expect(same.reusedTokens).toBe(first.promptTokens - textTokens(' What is in it?'));
      await run(c, [{ type: 'text', text: 'Something else entirely, to take the only sequence.' }], 2);
      const other = await run(c, prompt(imageA1, ' Describe it.'), 2);
      expect(other.reusedTokens).toBeLessThanOrEqual(textTokens('Look at this picture:', true) + textTokens('<start_of_image>'));
      // a warmed prefix with an image, continued by a key
      const warm = await c.prefillOnly([{ type: 'text', text: 'Look at this picture:' }, { type: 'image', image: imageB }, { type: 'text', text: ' Now:' }]);
      const child = await c.generate({ parentKey: warm.key, prompt: ' what is it?', maxTokens: 2, temperature: 0 }).result;
      expect(child.reusedTokens).toBe(warm.tokens);
      expect(child.promptTokens).toBe(warm.tokens + textTokens(' what is it?'));
    } finally {
      await c.dispose();
    }
  });

  it('chat messages with image parts: the template renders around the image, whose tokens are spliced in at its place', async () => {
    const template = ChatTemplate.fromModel(model);
    const withImage = [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'Look at this picture: ' }, { type: 'image' as const, image: imageA }, { type: 'text' as const, text: ' What is in it?' }] }];
    const p = await buildChatPromptWithMedia(model, withImage, { template });
    const ids = Array.from(p.tokens);
    const first = ids.findIndex((t) => t < 0);
    const media = ids.filter((t) => t < 0);
    expect(media.length).toBe(projector.tokensPerImage);
    expect(ids.slice(first, first + media.length).every((t) => t < 0)).toBe(true); // one run
    // the text around the image is the template's, tokenized as for text-only messages
    const before = buildChatPrompt(model, [{ role: 'user', content: 'Look at this picture: ' }], { template, addGenerationPrompt: false }).tokens;
    const head = Array.from(before).slice(0, Array.from(before).length - model.tokenize('<|im_end|>\n', { addSpecial: false, parseSpecial: true }).length);
    expect(ids.slice(0, head.length)).toEqual(head);
    // the prompt runs, and the same conversation again reuses the image's KV
    const c = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, toolCallMarkers: false });
    try {
      const r1 = await c.generate({ prompt: p.tokens, maxTokens: 2, temperature: 0 }).result;
      const again = await buildChatPromptWithMedia(model, withImage, { template });
      expect(Array.from(again.tokens)).toEqual(ids);
      const r2 = await c.generate({ prompt: again.tokens, maxTokens: 2, temperature: 0 }).result;
      expect(r2.reusedTokens).toBe(r1.promptTokens - 1);
    } finally {
      await c.dispose();
    }
    // bad media names the message and the part
    const bad = [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'x' }, { type: 'image' as const, image: Buffer.from('not an image at all') }] }];
    await expect(buildChatPromptWithMedia(model, bad, { template })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('messages[0].content[1] (image)') });
    // without the media path, a media part is refused
    expect(() => buildChatPrompt(model, withImage, { template })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it('an M-RoPE text model (zoo qwen35, hybrid): the image gets libmtmd\'s 2-D positions; the cached run equals a cold one', async () => {
    const d = (await zooModels(['qwen35']))['qwen35'];
    const p = await ensureProjector({ projectionDim: d.nEmbd });
    const m = await loadModel(d.path, { projector: p.path });
    try {
      expect(m.projector?.mrope).toBe(true);
      const warm = await m.createContext({ contextSize: 512, threads: 2, toolCallMarkers: false });
      const cold = await m.createContext({ contextSize: 512, threads: 2, toolCallMarkers: false });
      const a = await warm.generate({ prompt: prompt(imageA), maxTokens: 4, temperature: 0, emitTokenIds: true }).result;
      const b = await warm.generate({ prompt: prompt(imageA), maxTokens: 4, temperature: 0, emitTokenIds: true }).result;
      expect(b.reusedTokens).toBe(a.promptTokens - 1); // a hybrid memory restores the checkpoint before the last prompt token
      const c = await cold.generate({ prompt: prompt(imageA), maxTokens: 4, temperature: 0, emitTokenIds: true }).result;
      expect(Array.from(b.tokens!)).toEqual(Array.from(c.tokens!));
      expect(Array.from(a.tokens!)).toEqual(Array.from(c.tokens!));
      await warm.dispose();
      await cold.dispose();
    } finally {
      await m.dispose();
    }
  });

  it('bad media: typed errors naming the part, and the context keeps working', async () => {
    const bad = (image: Uint8Array | string) => run(ctx, prompt(image), 1);
    const truncated = imageA.subarray(0, Math.floor(imageA.length / 2));
    await expect(bad(truncated)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('Prompt part 1 (image)') });
    const corrupt = Buffer.concat([imageA.subarray(0, 33), Buffer.alloc(200, 0x33)]);
    await expect(bad(corrupt)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('Prompt part 1 (image)') });
    await expect(bad(Buffer.from('RIFF\0\0\0\0WEBPVP8 not an image we read'))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/Prompt part 1 \(image\).*unsupported format/) });
    await expect(bad(pngHeaderOnly(20_000, 20_000))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/Prompt part 1 \(image\).*maxPixels/) });
    await expect(bad('https://example.com/cat.png')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('not fetched') });
    await expect(bad('data:image/png;base64,@@@')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('base64') });
    // a prompt may not end with media
    await expect(ctx.generate({ prompt: [{ type: 'text', text: 'x' }, { type: 'image', image: imageA }], maxTokens: 1 }).result).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    const ok = await run(ctx, prompt(imageA), 2);
    expect(ok.generatedTokens).toBe(2);
  });
});
