// truncate-middle never cuts through an image's run of media ids (src/server/overflow.ts).
import { describe, expect, it } from 'vitest';
import { fitPrompt } from '../../src/server/overflow.js';

describe('fitPrompt with media runs', () => {
  it('moves each cut to the edge of a run: an image is kept or dropped whole', () => {
    // 10 text tokens, a 20-embedding image (negative ids), 10 text tokens, another image, 10 text
    const run = (seed: number) => Array.from({ length: 20 }, (_, i) => -(2 ** 31) + seed * 100 + i);
    const tokens = Int32Array.from([...Array(10).keys(), ...run(1), ...Array.from({ length: 10 }, (_, i) => 100 + i), ...run(2), ...Array.from({ length: 10 }, (_, i) => 200 + i)]);
    const f = fitPrompt(tokens, 64, 16, 'truncate-middle'); // budget 48: head 24 and tail 24 would cut both runs
    const out = Array.from(f.tokens);
    expect(out.length).toBeLessThanOrEqual(48);
    expect(f.truncatedTokens).toBe(tokens.length - out.length);
    // every run in the output is a whole run of the input
    const runs: number[][] = [];
    out.forEach((t, i) => {
      if (t >= 0) return;
      if (i > 0 && out[i - 1]! < 0) runs[runs.length - 1]!.push(t);
      else runs.push([t]);
    });
    for (const r of runs) expect([run(1), run(2)]).toContainEqual(r);
    // the text around is kept in order
    expect(out.slice(0, 10)).toEqual([...Array(10).keys()]);
    expect(out.slice(-10)).toEqual(Array.from({ length: 10 }, (_, i) => 200 + i));
    // text-only prompts are cut as before: half and half
    const text = Int32Array.from(Array.from({ length: 100 }, (_, i) => i));
    const t = fitPrompt(text, 64, 16, 'truncate-middle');
    expect(Array.from(t.tokens)).toEqual([...Array.from({ length: 24 }, (_, i) => i), ...Array.from({ length: 24 }, (_, i) => 76 + i)]);
  });
});
