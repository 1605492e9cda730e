// A chat client sends every image of its history again each turn: prepareChatMedia keeps the
// tokens of media it has seen, keyed by a hash of the bytes, and uses them only while the
// projector still holds that media (the engine finds media runs there). Equal bytes give the
// tokens a fresh tokenization gives; other pixels of the same size never share them; an entry
// whose media the projector no longer holds is dropped, not used.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type ChatMessage, type Model } from '../../src/index.js';
import { prepareChatMedia } from '../../src/chat/media.js';
import { cachedMediaTokens, rememberMediaTokens } from '../../src/chat/media-tokens-cache.js';
import { native } from '../../src/native/binding.js';
import { patternPng } from '../helpers/images.js';
import { ensureProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

describe('media tokens kept across requests (zoo qwen3 + a generated gemma3 projector)', () => {
  let model: Model;
  const imageA = patternPng(48, 40, 11);
  const imageB = patternPng(48, 40, 12); // same size, other pixels
  const turn = (image: Uint8Array): ChatMessage[] => [{ role: 'user', content: [{ type: 'text', text: 'Look:' }, { type: 'image', image }] }];
  const tokensOf = async (image: Uint8Array): Promise<Int32Array> => [...(await prepareChatMedia(model, turn(image))).media.values()][0]!;

  beforeAll(async () => {
    const text = (await zooModels(['qwen3']))['qwen3'];
    const projector = await ensureProjector({ projectionDim: text.nEmbd });
    model = await loadModel(text.path, { projector: projector.path });
  });
  afterAll(async () => {
    await model?.dispose();
  });

  it('reuses the tokens of the same bytes, equal to a fresh tokenization; other pixels get their own', async () => {
    const first = await tokensOf(imageA);
    const again = await tokensOf(imageA);
    expect(again).toBe(first); // served from the cache
    const direct = await native.tokenizeMedia(model.nativeHandle(), [imageA], false, false, model.mediaLimits.maxPixels, model.mediaLimits.maxAudioSeconds);
    expect([...again]).toEqual([...direct.tokens]);
    const other = await tokensOf(imageB);
    expect(other.length).toBe(first.length);
    expect([...other]).not.toEqual([...first]);
    // a copy of the bytes (another buffer, same content) is the same image
    expect(await tokensOf(Uint8Array.from(imageA))).toBe(first);
  });

  it('uses an entry only while the projector holds its media', async () => {
    const real = await tokensOf(imageB);
    expect(native.mediaHeld(model.nativeHandle(), real)).toBe(true);
    expect(native.mediaHeld(model.nativeHandle(), Int32Array.from([1, 2, 3]))).toBe(true); // text only
    // media ids of no image this projector tokenized
    const unknown = Int32Array.from([5, ...real.filter((t) => t < 0).map((t) => t ^ 0x5a5a), 6]);
    expect(native.mediaHeld(model.nativeHandle(), unknown)).toBe(false);
    const bytes = patternPng(48, 40, 13);
    const { key } = cachedMediaTokens(model, bytes);
    rememberMediaTokens(model, key, unknown);
    expect(cachedMediaTokens(model, bytes).tokens).toBeUndefined();
    const fresh = await tokensOf(bytes);
    expect(fresh.some((t) => t < 0)).toBe(true);
    expect(native.mediaHeld(model.nativeHandle(), fresh)).toBe(true);
    expect(cachedMediaTokens(model, bytes).tokens).toBe(fresh);
  });
});
