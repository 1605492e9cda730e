// Prompts with media: content parts (text, images, audio) checked here, at the edge, then
// tokenized by libmtmd on a native thread (native/media/media_js.cc). An image becomes a run
// of media ids derived from a hash of its decoded pixels and the projector, so the caches key
// on the media itself (native/media/media_ids.h). The tokens carry their media to the request
// mappers (mediaOf) without another argument through every path.
import { LlamuxError, abortError, fromNative, isLlamuxError } from '../errors.js';
import type { PromptPart } from '../options.js';
import { native, type NativeMediaList } from '../native/binding.js';
import { audioHeader } from './audio-header.js';
import type { ModelHandle } from '../model/handle.js';
import type { MediaLimits, ModelCapabilities } from '../model/types.js';

const mediaOfTokens = new WeakMap<Int32Array, NativeMediaList>();

/** The media a prompt's tokens hold (null: text only), for the native request. */
export function mediaOf(tokens: Int32Array): NativeMediaList | null {
  return mediaOfTokens.get(tokens) ?? null;
}

/** Carries `from`'s media over to `to` (a prompt built from another one). */
export function keepMedia(from: Int32Array, to: Int32Array): Int32Array {
  const m = mediaOfTokens.get(from);
  if (m) mediaOfTokens.set(to, m);
  return to;
}

interface Sniffed {
  kind: 'image' | 'audio';
  format: string;
  width?: number;
  height?: number;
}

/** The format from the file's first bytes, and an image's size from its header. */
export function sniffMedia(b: Uint8Array): Sniffed | undefined {
  const at = (i: number, ...sig: number[]): boolean => sig.every((x, k) => b[i + k] === x);
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  if (at(0, 0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) {
    return b.length >= 24 ? { kind: 'image', format: 'PNG', width: dv.getUint32(16), height: dv.getUint32(20) } : { kind: 'image', format: 'PNG' };
  }
  if (at(0, 0x47, 0x49, 0x46, 0x38)) {
    return b.length >= 10 ? { kind: 'image', format: 'GIF', width: dv.getUint16(6, true), height: dv.getUint16(8, true) } : { kind: 'image', format: 'GIF' };
  }
  if (at(0, 0x42, 0x4d)) {
    return b.length >= 26 ? { kind: 'image', format: 'BMP', width: Math.abs(dv.getInt32(18, true)), height: Math.abs(dv.getInt32(22, true)) } : { kind: 'image', format: 'BMP' };
  }
  if (at(0, 0xff, 0xd8, 0xff)) return { kind: 'image', format: 'JPEG', ...jpegSize(b, dv) };
  if (at(0, 0x52, 0x49, 0x46, 0x46) && at(8, 0x57, 0x41, 0x56, 0x45)) return { kind: 'audio', format: 'WAV' };
  if (at(0, 0x66, 0x4c, 0x61, 0x43)) return { kind: 'audio', format: 'FLAC' };
  if (at(0, 0x49, 0x44, 0x33) || (b[0] === 0xff && ((b[1] ?? 0) & 0xe0) === 0xe0)) return { kind: 'audio', format: 'MP3' };
  return undefined;
}

// The first start-of-frame marker's size (SOF0..SOF15 but DHT, JPG, DAC).
function jpegSize(b: Uint8Array, dv: DataView): { width?: number; height?: number } {
  let i = 2;
  while (i + 9 < b.length) {
    if (b[i] !== 0xff) return {};
    const m = b[i + 1]!;
    if (m === 0xff) {
      i++;
      continue;
    }
    const len = dv.getUint16(i + 2);
    if (m >= 0xc0 && m <= 0xcf && m !== 0xc4 && m !== 0xc8 && m !== 0xcc) return { height: dv.getUint16(i + 5), width: dv.getUint16(i + 7) };
    i += 2 + len;
  }
  return {};
}

function decodeSource(src: Uint8Array | string, where: string, remoteAllowed: boolean): Uint8Array {
  if (typeof src !== 'string') return src;
  const m = /^data:([^,;]*)((?:;[^,;]*)*),/s.exec(src);
  if (!m) {
    if (/^https?:\/\//i.test(src)) {
      throw new LlamuxError('INVALID_ARGUMENT', `${where}: a remote URL${remoteAllowed ? ' must be fetched by the caller' : ' is not fetched'}; send the media as bytes or a data: URL`);
    }
    throw new LlamuxError('INVALID_ARGUMENT', `${where}: expected bytes or a data: URL`);
  }
  const body = src.slice(m[0].length);
  if (!m[2]!.split(';').includes('base64')) return new TextEncoder().encode(decodeURIComponent(body));
  if (!/^[A-Za-z0-9+/\s]*={0,2}\s*$/.test(body)) throw new LlamuxError('INVALID_ARGUMENT', `${where}: the data: URL is not valid base64`);
  return new Uint8Array(Buffer.from(body, 'base64'));
}

/** The projector's capabilities and limits, or UNSUPPORTED without one. */
function mediaModel(model: ModelHandle): { caps: ModelCapabilities; limits: MediaLimits } {
  const caps = model.capabilities;
  if (!caps.vision && !caps.audio) {
    throw new LlamuxError('UNSUPPORTED', 'This model was loaded without a projector: loadModel(path, { projector: "mmproj.gguf" }) to send images or audio');
  }
  return { caps, limits: model.mediaLimits };
}

/**
 * One media part checked (kind, format, size) and decoded from a data: URL: the bytes the
 * native tokenizer takes. `where` names the part in errors.
 * @throws LlamuxError INVALID_ARGUMENT, UNSUPPORTED (a kind the projector does not read)
 */
export function checkMediaPart(model: ModelHandle, p: Exclude<PromptPart, { type: 'text' }>, where: string): Uint8Array {
  const { caps, limits } = mediaModel(model);
  const data = decodeSource(p.type === 'image' ? p.image : p.audio, where, false);
  if (data.length === 0) throw new LlamuxError('INVALID_ARGUMENT', `${where}: empty`);
  if (data.length > limits.maxBytes) throw new LlamuxError('INVALID_ARGUMENT', `${where}: ${data.length} bytes, over mediaLimits.maxBytes (${limits.maxBytes})`);
  const s = sniffMedia(data);
  if (!s) throw new LlamuxError('INVALID_ARGUMENT', `${where}: unsupported format (images: PNG, JPEG, BMP, GIF; audio: WAV, MP3, FLAC)`);
  if (s.kind !== p.type) throw new LlamuxError('INVALID_ARGUMENT', `${where}: the bytes are ${s.format} ${s.kind}, not ${p.type}`);
  if (s.kind === 'image' && !caps.vision) throw new LlamuxError('UNSUPPORTED', `${where}: this model's projector reads no images`);
  if (s.kind === 'audio' && !caps.audio) throw new LlamuxError('UNSUPPORTED', `${where}: this model's projector reads no audio`);
  if (s.kind === 'audio') {
    const h = audioHeader(data, s.format);
    if (h.problem !== undefined) throw new LlamuxError('INVALID_ARGUMENT', `${where}: ${h.problem}`);
    if (h.seconds !== undefined && h.seconds > limits.maxAudioSeconds) {
      throw new LlamuxError('INVALID_ARGUMENT', `${where}: ${h.seconds.toFixed(2)} s of ${s.format} audio, over mediaLimits.maxAudioSeconds (${limits.maxAudioSeconds})`);
    }
  }
  if (s.width !== undefined && s.height !== undefined) {
    if (s.width === 0 || s.height === 0) throw new LlamuxError('INVALID_ARGUMENT', `${where}: the ${s.format} header gives an empty image (${s.width}x${s.height})`);
    if (s.width * s.height > limits.maxPixels) {
      throw new LlamuxError('INVALID_ARGUMENT', `${where}: ${s.width}x${s.height} pixels, over mediaLimits.maxPixels (${limits.maxPixels})`);
    }
  }
  return data;
}

/**
 * The parts of a prompt checked (kind, format, size, count) and turned into what the native
 * tokenizer takes: text as strings (adjacent texts joined), media as bytes.
 * @throws LlamuxError INVALID_ARGUMENT naming the part, UNSUPPORTED (no projector, or a kind it does not read)
 */
export function checkParts(model: ModelHandle, parts: readonly PromptPart[], label = 'Prompt part'): { wire: Array<string | Uint8Array>; index: number[] } {
  const { limits } = mediaModel(model);
  const wire: Array<string | Uint8Array> = [];
  const index: number[] = []; // wire position -> part index
  let media = 0;
  parts.forEach((p, i) => {
    const where = `${label} ${i} (${p.type})`;
    if (p.type === 'text') {
      const last = wire.length - 1;
      if (last >= 0 && typeof wire[last] === 'string') wire[last] = (wire[last] as string) + p.text;
      else {
        wire.push(p.text);
        index.push(i);
      }
      return;
    }
    if (++media > limits.maxPerPrompt) throw new LlamuxError('INVALID_ARGUMENT', `${where}: more than ${limits.maxPerPrompt} media parts in one prompt (mediaLimits.maxPerPrompt)`);
    wire.push(checkMediaPart(model, p, where));
    index.push(i);
  });
  if (typeof wire[wire.length - 1] !== 'string') throw new LlamuxError('INVALID_ARGUMENT', `${label} ${parts.length - 1}: a prompt must end with text after its last media part`);
  return { wire, index };
}

/**
 * Token ids of a prompt with media (on a native thread): text through the model's tokenizer,
 * each medium as its run of media ids; the result carries the media (mediaOf).
 */
export async function mediaPromptTokens(
  model: ModelHandle,
  parts: readonly PromptPart[],
  o: { addSpecial: boolean; parseSpecial: boolean; signal?: AbortSignal | undefined },
  label = 'Prompt part',
): Promise<Int32Array> {
  const { wire, index } = checkParts(model, parts, label);
  const stack = new Error().stack;
  let r;
  try {
    r = await native.tokenizeMedia(model.nativeHandle(), wire, o.addSpecial, o.parseSpecial, model.mediaLimits.maxPixels, model.mediaLimits.maxAudioSeconds);
  } catch (e) {
    const err = fromNative(e, stack);
    const part = (e as { part?: unknown })?.part;
    if (isLlamuxError(err) && typeof part === 'number' && index[part] !== undefined) {
      const i = index[part]!;
      const msg = err.message.replace(/^Prompt part \d+ /, '');
      throw new LlamuxError(err.code, `${label} ${i} (${parts[i]!.type}): ${msg}`, { cause: e });
    }
    throw err;
  }
  if (o.signal?.aborted) throw abortError(o.signal, 'Tokenization');
  mediaOfTokens.set(r.tokens, r.media);
  return r.tokens;
}
