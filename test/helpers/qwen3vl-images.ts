// The images and prompt text of the Qwen-VL tests (test/api/multimodal-qwen3vl*.test.ts): with
// the generated qwen3vl_merger projector's 24-pixel input and 2x2 merge, a 24x24 image is 9
// embeddings over 3 positions, 40x24 15 over 5.
import type { PromptPart } from '../../src/index.js';
import { encodePng } from './images.js';

export const pattern = (w: number, h: number, seed: number, poke?: [number, number]) =>
  encodePng(w, h, (x, y) => {
    const v = Math.imul(x * 73856093 ^ y * 19349663 ^ seed * 83492791, 0x9e3779b1) >>> 0;
    return poke && x === poke[0] && y === poke[1] ? [0, 0, 0] : [v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff];
  });

export const square = pattern(24, 24, 5); // 3x3 merged patches: 9 embeddings, 3 positions
export const wide = pattern(40, 24, 6); // 5x3: 15 embeddings, 5 positions
export const wide1 = pattern(40, 24, 6, [13, 7]); // `wide` with one pixel changed

export const HEAD = 'Look at this picture:';
export const TAIL = ' What is in it?';
export const parts = (image: Uint8Array, tail = TAIL): PromptPart[] => [
  { type: 'text', text: HEAD },
  { type: 'image', image },
  { type: 'text', text: tail },
];

