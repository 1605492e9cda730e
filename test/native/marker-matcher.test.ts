import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { native } from '../../src/native/binding.js';

const I = (a: number[]) => Int32Array.from(a);
type Out = ReturnType<typeof native.testing.markerMatcher>;

function run(markers: { start: number[]; end: number[]; payloadStart?: number[]; payloadEnd?: number[] }, tokens: number[]): Out {
  return native.testing.markerMatcher({
    start: I(markers.start),
    end: I(markers.end),
    ...(markers.payloadStart ? { payloadStart: I(markers.payloadStart), payloadEnd: I(markers.payloadEnd!) } : {}),
  }, I(tokens));
}

const kinds = (o: Out) => o.outputs.map(([k, t]) => `${k}:${Array.from(t).join(',')}`);

describe('native marker matcher', () => {
  it('finds a single-token span with text before and after', () => {
    const o = run({ start: [100], end: [101] }, [1, 2, 100, 5, 6, 101, 3]);
    expect(kinds(o)).toEqual(['text:1,2', 'open:100', 'body:5,6', 'close:101', 'text:3']);
  });

  it('matches multi-token markers split across pushes, and two calls in one turn', () => {
    const o = run({ start: [7, 8, 9], end: [9, 8] }, [1, 7, 8, 9, 4, 9, 8, 2, 7, 8, 9, 5, 9, 8]);
    expect(kinds(o)).toEqual(['text:1', 'open:7,8,9', 'body:4', 'close:9,8', 'text:2', 'open:7,8,9', 'body:5', 'close:9,8']);
  });

  it('releases a false start that does not complete, in order', () => {
    const o = run({ start: [7, 8, 9], end: [10] }, [1, 7, 8, 3, 4]);
    expect(kinds(o)).toEqual(['text:1,7,8,3,4']);
  });

  it('handles overlapping prefixes (a token that ends one attempt and starts another)', () => {
    // start = A A B; stream A A A B: the first A is text, the last three are the marker.
    const o = run({ start: [5, 5, 6], end: [9] }, [5, 5, 5, 6, 1, 9]);
    expect(kinds(o)).toEqual(['text:5', 'open:5,5,6', 'body:1', 'close:9']);
  });

  it('switches regions for payload markers and wants greedy only for wrapper syntax', () => {
    const o = run({ start: [100], end: [101], payloadStart: [200], payloadEnd: [201] }, [1, 100, 3, 200, 4, 4, 201, 5, 101, 2]);
    expect(kinds(o)).toEqual(['text:1', 'open:100', 'body:3', 'payloadOpen:200', 'body:4,4', 'payloadClose:201', 'body:5', 'close:101', 'text:2']);
    // greedy after each pushed token: wrapper → true, payload → false, text → false
    expect(o.greedy).toEqual([false, true, true, false, false, false, true, true, false, false]);
  });

  it('reports a span still open at the end (region stays in the span)', () => {
    const o = run({ start: [100], end: [101] }, [1, 100, 3, 4]);
    expect(kinds(o)).toEqual(['text:1', 'open:100', 'body:3,4']);
    expect(o.region).not.toBe(0);
  });

  it('wants greedy while a start marker is partially matched', () => {
    const o = run({ start: [7, 8], end: [9] }, [1, 7, 3]);
    expect(o.greedy).toEqual([false, true, false]);
  });

  it('property: outputs reproduce the input exactly and spans are well formed', () => {
    const markerArb = fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 3 });
    fc.assert(
      fc.property(
        markerArb, markerArb, fc.option(fc.tuple(markerArb, markerArb), { nil: undefined }),
        fc.array(fc.integer({ min: 0, max: 5 }), { maxLength: 60 }),
        (start, end, payload, stream) => {
          const markers = payload ? { start, end, payloadStart: payload[0], payloadEnd: payload[1] } : { start, end };
          const o = run(markers, stream);
          // 1) every token comes out exactly once, in order
          const all = o.outputs.flatMap(([, t]) => Array.from(t));
          expect(all).toEqual(stream);
          // 2) markers are what they claim to be, and the region sequence is consistent
          let region: 'text' | 'wrapper' | 'payload' = 'text';
          for (const [kind, t] of o.outputs) {
            const toks = Array.from(t);
            if (kind === 'open') { expect(region).toBe('text'); expect(toks).toEqual(start); region = 'wrapper'; }
            else if (kind === 'close') { expect(region).toBe('wrapper'); expect(toks).toEqual(end); region = 'text'; }
            else if (kind === 'payloadOpen') { expect(region).toBe('wrapper'); expect(toks).toEqual(payload![0]); region = 'payload'; }
            else if (kind === 'payloadClose') { expect(region).toBe('payload'); expect(toks).toEqual(payload![1]); region = 'wrapper'; }
            else if (kind === 'text') expect(region).toBe('text');
            else expect(region).not.toBe('text');
          }
          // 3) text released outside spans never contains a complete start marker
          for (const [kind, t] of o.outputs) {
            if (kind !== 'text') continue;
            const s = Array.from(t).join(',');
            if (start.length <= t.length) expect(`,${s},`.includes(`,${start.join(',')},`)).toBe(false);
          }
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('native text stream (UTF-8 hold-back and stop strings)', () => {
  const enc = (s: string) => new Uint8Array(Buffer.from(s, 'utf8'));

  it('property: any split of any text into byte pieces yields the text, never a split character', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 40 }), fc.array(fc.integer({ min: 1, max: 5 }), { maxLength: 200 }), (text, cuts) => {
        const bytes = Buffer.from(text, 'utf8');
        const pieces: Uint8Array[] = [];
        let at = 0;
        for (const c of cuts) {
          if (at >= bytes.length) break;
          pieces.push(new Uint8Array(bytes.subarray(at, at + c)));
          at += c;
        }
        if (at < bytes.length) pieces.push(new Uint8Array(bytes.subarray(at)));
        const r = native.testing.textStream([], pieces);
        expect(Buffer.from(r.text).toString('utf8')).toBe(text);
        for (const d of r.deltas) {
          const s = Buffer.from(d).toString('utf8');
          expect(Buffer.from(s, 'utf8').equals(Buffer.from(d))).toBe(true); // valid UTF-8 on its own
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('property: output is the text before the first stop, with nothing past it ever emitted', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 30 }), fc.string({ minLength: 1, maxLength: 4 }), fc.string({ maxLength: 10 }),
        fc.array(fc.integer({ min: 1, max: 4 }), { maxLength: 60 }),
        (before, stop, after, cuts) => {
          const text = before + stop + after;
          const bytes = Buffer.from(text, 'utf8');
          const pieces: Uint8Array[] = [];
          let at = 0;
          for (const c of cuts) {
            if (at >= bytes.length) break;
            pieces.push(new Uint8Array(bytes.subarray(at, at + c)));
            at += c;
          }
          if (at < bytes.length) pieces.push(new Uint8Array(bytes.subarray(at)));
          const r = native.testing.textStream([stop], pieces);
          const expected = text.slice(0, text.indexOf(stop));
          expect(r.stopped).toBe(true);
          expect(Buffer.from(r.text).toString('utf8')).toBe(expected);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('holds back a partial stop string and releases it when the stop fails', () => {
    const r = native.testing.textStream(['STOP'], [enc('ab ST'), enc('OX'), enc(' end')]);
    expect(r.stopped).toBe(false);
    expect(r.deltas.map((d) => Buffer.from(d).toString())).toEqual(['ab ', 'STOX', ' end']);
  });
});
