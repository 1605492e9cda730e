// What an audio file's header says before anything is decoded: its length in seconds (WAV,
// FLAC), so an over-long clip is refused without decoding it, and the inconsistencies a
// decoder would paper over (a WAV whose data chunk is cut short decodes to its first part).
// MP3 has no header that says its length: the decoded samples are checked instead (native).

/** An audio header's facts, or `problem`: why the file cannot be what it says it is. */
export interface AudioHeader {
  readonly seconds?: number;
  readonly problem?: string;
}

const WAVE_FORMATS: Readonly<Record<number, string>> = { 1: 'PCM', 3: 'IEEE float', 0xfffe: 'extensible' };

function wavHeader(b: Uint8Array, dv: DataView): AudioHeader {
  let fmt: { format: number; channels: number; rate: number; blockAlign: number; bits: number } | undefined;
  let at = 12;
  while (at + 8 <= b.length) {
    const id = String.fromCharCode(b[at]!, b[at + 1]!, b[at + 2]!, b[at + 3]!);
    const size = dv.getUint32(at + 4, true);
    const body = at + 8;
    if (id === 'fmt ') {
      if (size < 16 || body + 16 > b.length) return { problem: 'the WAV fmt chunk is truncated' };
      fmt = {
        format: dv.getUint16(body, true),
        channels: dv.getUint16(body + 2, true),
        rate: dv.getUint32(body + 4, true),
        blockAlign: dv.getUint16(body + 12, true),
        bits: dv.getUint16(body + 14, true),
      };
      if (WAVE_FORMATS[fmt.format] === undefined) return { problem: `WAV sample format ${fmt.format} is not PCM or IEEE float` };
      if (fmt.channels === 0 || fmt.rate === 0 || fmt.blockAlign === 0 || fmt.bits === 0) {
        return { problem: `the WAV header is inconsistent (${fmt.channels} channels, ${fmt.rate} Hz, ${fmt.bits} bits)` };
      }
    } else if (id === 'data') {
      if (!fmt) return { problem: 'the WAV data chunk comes before its fmt chunk' };
      const present = b.length - body;
      // 0 and 0xffffffff: written by a streaming encoder that did not know the length
      const declared = size === 0 || size === 0xffffffff ? present : size;
      if (declared > present) return { problem: `truncated: the WAV header declares ${declared} bytes of samples, ${present} are present` };
      const frames = Math.floor(declared / fmt.blockAlign);
      if (frames === 0) return { problem: 'the WAV file holds no samples' };
      return { seconds: frames / fmt.rate };
    }
    at = body + size + (size & 1); // chunks are padded to even sizes
  }
  return { problem: fmt ? 'truncated: the WAV file has no data chunk' : 'truncated: the WAV file has no fmt chunk' };
}

function flacHeader(b: Uint8Array, dv: DataView): AudioHeader {
  // "fLaC", then the STREAMINFO block first: a 4-byte block header and 34 bytes
  if (b.length < 8 + 34 || (b[4]! & 0x7f) !== 0) return { problem: 'truncated: the FLAC STREAMINFO block is missing' };
  const s = 8;
  const rate = (dv.getUint16(s + 10) << 4) | (b[s + 12]! >> 4);
  const total = (b[s + 13]! & 0x0f) * 2 ** 32 + dv.getUint32(s + 14);
  if (rate === 0) return { problem: 'the FLAC header gives a sample rate of 0' };
  // 0 total samples: the encoder did not know (a stream); the decoded length is checked instead
  return total === 0 ? {} : { seconds: total / rate };
}

/** The header facts of a WAV, FLAC or MP3 file (`format` as sniffed from its first bytes). */
export function audioHeader(b: Uint8Array, format: string): AudioHeader {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  if (format === 'WAV') return wavHeader(b, dv);
  if (format === 'FLAC') return flacHeader(b, dv);
  return {};
}
