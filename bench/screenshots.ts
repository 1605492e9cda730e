// Generated "screenshots" for the multimodal suite: PNG files of a desktop-like scene (a
// background, a window with a title bar and lines of text-like marks, a cursor) that changes
// with each step of an agent's session, so every turn sends a new, different image.
import { crc32, deflateSync } from 'node:zlib';
import { Prng } from '../src/gguf/prng.js';

function chunk(type: string, data: Uint8Array): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'ascii');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(data, crc32(head.subarray(4))), 0);
  return Buffer.concat([head, data, crc]);
}

/** An RGB PNG from a pixel buffer (3 bytes a pixel, rows top to bottom). */
function encodePng(width: number, height: number, rgb: Uint8Array): Buffer {
  const raw = Buffer.alloc((width * 3 + 1) * height);
  for (let y = 0; y < height; y++) raw.set(rgb.subarray(y * width * 3, (y + 1) * width * 3), y * (width * 3 + 1) + 1);
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', new Uint8Array(0))]);
}

/** The screen after `step` actions: deterministic, and different for every step. */
export function screenshotPng(width: number, height: number, step: number): Buffer {
  const r = new Prng(1000 + step);
  const px = new Uint8Array(width * height * 3);
  const fill = (x0: number, y0: number, w: number, h: number, c: readonly [number, number, number]) => {
    for (let y = Math.max(0, y0); y < Math.min(height, y0 + h); y++) {
      for (let x = Math.max(0, x0); x < Math.min(width, x0 + w); x++) px.set(c, (y * width + x) * 3);
    }
  };
  const colour = (): [number, number, number] => [Math.floor(r.next() * 256), Math.floor(r.next() * 256), Math.floor(r.next() * 256)];
  fill(0, 0, width, height, colour());
  const wx = Math.floor(r.next() * width * 0.3);
  const wy = Math.floor(r.next() * height * 0.3);
  const ww = Math.floor(width * 0.6);
  const wh = Math.floor(height * 0.6);
  fill(wx, wy, ww, wh, [240, 240, 240]);
  fill(wx, wy, ww, Math.max(2, Math.floor(wh / 12)), colour());
  const lineH = Math.max(2, Math.floor(wh / 16));
  for (let line = 2; line * lineH < wh - lineH; line += 2) fill(wx + 4, wy + line * lineH, Math.floor(r.next() * (ww - 8)), Math.max(1, lineH - 1), [30, 30, 30]);
  const cx = Math.floor(r.next() * width);
  const cy = Math.floor(r.next() * height);
  fill(cx, cy, Math.max(2, width >> 6), Math.max(3, height >> 5), [0, 0, 0]);
  return encodePng(width, height, px);
}
