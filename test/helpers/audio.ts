// Small audio files for media tests, written here byte by byte so a test controls every sample:
// WAV (16-bit PCM or 32-bit float, any rate and channel count, optional extra chunks), a FLAC
// header alone (its STREAMINFO length is checked before any decoding).

/** Options of {@link encodeWav}. */
export interface WavOptions {
  /** Default 16000. */
  readonly rate?: number;
  /** Default 1; samples are interleaved frames. */
  readonly channels?: number;
  /** 16-bit PCM (default) or 32-bit IEEE float. */
  readonly encoding?: 'pcm16' | 'float32';
  /** A chunk between `fmt ` and `data` (a decoder skips it: other bytes, the same samples). */
  readonly extraChunk?: { id: string; body: Uint8Array };
  /** The data size the header declares (default: the real one); a larger one makes a truncated file. */
  readonly declaredDataBytes?: number;
  /** WAVE format tag (default 1 for pcm16, 3 for float32). */
  readonly formatTag?: number;
}

/** A RIFF/WAVE file of `samples` (in [-1, 1]; pcm16 rounds to the nearest 1/32767 step). */
export function encodeWav(samples: ArrayLike<number>, o: WavOptions = {}): Buffer {
  const rate = o.rate ?? 16000;
  const channels = o.channels ?? 1;
  const float = o.encoding === 'float32';
  const bytesPer = float ? 4 : 2;
  const data = Buffer.alloc(samples.length * bytesPer);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]!));
    if (float) data.writeFloatLE(s, i * 4);
    else data.writeInt16LE(Math.round(s * 32767), i * 2);
  }
  const fmt = Buffer.alloc(16);
  fmt.writeUInt16LE(o.formatTag ?? (float ? 3 : 1), 0);
  fmt.writeUInt16LE(channels, 2);
  fmt.writeUInt32LE(rate, 4);
  fmt.writeUInt32LE(rate * channels * bytesPer, 8);
  fmt.writeUInt16LE(channels * bytesPer, 12);
  fmt.writeUInt16LE(bytesPer * 8, 14);
  const chunk = (id: string, body: Uint8Array, declared = body.length): Buffer => {
    const head = Buffer.alloc(8);
    head.write(id, 0, 'ascii');
    head.writeUInt32LE(declared, 4);
    return Buffer.concat([head, body, body.length & 1 ? Buffer.alloc(1) : Buffer.alloc(0)]);
  };
  const body = Buffer.concat([
    Buffer.from('WAVE', 'ascii'),
    chunk('fmt ', fmt),
    ...(o.extraChunk ? [chunk(o.extraChunk.id, o.extraChunk.body)] : []),
    chunk('data', data, o.declaredDataBytes ?? data.length),
  ]);
  return Buffer.concat([chunk('RIFF', body).subarray(0, 8), body]);
}

/** A deterministic test signal: a few tones and a little noise, `seconds` long at `rate` Hz. */
export function testSignal(seconds: number, seed = 1, rate = 16000): Float32Array {
  const n = Math.round(seconds * rate);
  const out = new Float32Array(n);
  let s = (seed * 2654435761) >>> 0;
  const f1 = 220 + 40 * seed, f2 = 660 + 25 * seed;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const t = i / rate;
    out[i] = 0.4 * Math.sin(2 * Math.PI * f1 * t) + 0.2 * Math.sin(2 * Math.PI * f2 * t) * Math.sin(2 * Math.PI * 3 * t) + 0.05 * (s / 2 ** 32 - 0.5);
  }
  return out;
}

/** The first bytes of a FLAC file: "fLaC" and a STREAMINFO block declaring `totalSamples` at `rate`. */
export function flacHeaderOnly(rate: number, totalSamples: number): Buffer {
  const b = Buffer.alloc(8 + 34);
  b.write('fLaC', 0, 'ascii');
  b[4] = 0x80; // last metadata block, type 0 (STREAMINFO)
  b.writeUIntBE(34, 5, 3);
  const s = 8;
  b.writeUInt16BE(4096, s);
  b.writeUInt16BE(4096, s + 2);
  // sample rate (20 bits), channels - 1 (3), bits - 1 (5), total samples (36)
  b.writeUInt16BE(rate >>> 4, s + 10);
  b[s + 12] = ((rate & 0x0f) << 4) | (0 << 1) | (15 >> 4);
  b[s + 13] = ((15 & 0x0f) << 4) | Math.floor(totalSamples / 2 ** 32);
  b.writeUInt32BE(totalSamples >>> 0, s + 14);
  return b;
}
