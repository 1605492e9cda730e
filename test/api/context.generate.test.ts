import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamuxError, loadModel, type Context, type GenerateEvent, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

async function collect(gen: AsyncIterable<GenerateEvent>): Promise<GenerateEvent[]> {
  const out: GenerateEvent[] = [];
  for await (const ev of gen) out.push(ev);
  return out;
}

async function rejection(p: Promise<unknown>): Promise<LlamuxError> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e).toBeInstanceOf(LlamuxError);
  return e as LlamuxError;
}

describe('Context#generate() on the tiny Llama 2 model', () => {
  let model: Model;
  let ctx: Context;
  let noEos: Record<string, number>;

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    ctx = await model.createContext({ contextSize: 2048, sequences: 4 });
    noEos = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('reports the settings llama.cpp applied', () => {
    expect(ctx.settings).toMatchObject({ contextSize: 2048, sequenceContextSize: 2048, sequences: 4, unifiedKv: true, canTruncateKv: true });
    expect(ctx.settings.batchSize).toBe(512);
    expect(ctx.settings.threads).toBeGreaterThan(0);
  });

  it('streams text deltas and a final event whose text is their concatenation', async () => {
    const events = await collect(ctx.generate({ prompt: 'Once upon a time', maxTokens: 12, temperature: 0, emitTokenIds: true, logitBias: noEos }));
    const final = events.at(-1)!;
    expect(final.type).toBe('final');
    if (final.type !== 'final') return;
    const texts = events.filter((e) => e.type === 'text');
    expect(texts.map((e) => e.text).join('')).toBe(final.text);
    expect(final.finishReason).toBe('length');
    expect(final.generatedTokens).toBe(12);
    expect(final.tokens).toHaveLength(12);
    expect(model.detokenize(final.tokens!)).toBe(final.text.trimStart() === final.text ? final.text : model.detokenize(final.tokens!));
    expect(final.promptTokens).toBe(model.tokenize('Once upon a time').length);
    expect(final.prefilledTokens + final.reusedTokens).toBe(final.promptTokens);
    expect(final.timings.ttftMs).toBeGreaterThan(0);
    expect(final.timings.decodeTokensPerSec).toBeGreaterThan(0);
    expect(final.timings.prefillTokensPerSec).toBeGreaterThan(0);
  });

  it('is deterministic: greedy twice, and the same seed at temperature 1', async () => {
    const a = await ctx.complete({ prompt: 'The weather today', maxTokens: 16, temperature: 0 });
    const b = await ctx.complete({ prompt: 'The weather today', maxTokens: 16, temperature: 0 });
    expect(b.text).toBe(a.text);
    const s1 = await ctx.complete({ prompt: 'Roll the dice', maxTokens: 16, temperature: 1, seed: 7, topK: 0, topP: 1, minP: 0 });
    const s2 = await ctx.complete({ prompt: 'Roll the dice', maxTokens: 16, temperature: 1, seed: 7, topK: 0, topP: 1, minP: 0 });
    expect(s2.text).toBe(s1.text);
    const others = await Promise.all([8, 9, 10].map((seed) => ctx.complete({ prompt: 'Roll the dice', maxTokens: 16, temperature: 1, seed, topK: 0, topP: 1, minP: 0 })));
    expect(others.some((r) => r.text !== s1.text)).toBe(true);
  });

  it('accepts token ids as the prompt', async () => {
    const tokens = model.tokenize('The weather today');
    const a = await ctx.complete({ prompt: tokens, maxTokens: 8, temperature: 0 });
    const b = await ctx.complete({ prompt: 'The weather today', maxTokens: 8, temperature: 0 });
    expect(a.text).toBe(b.text);
    expect(a.promptTokens).toBe(tokens.length);
  });

  it('stops before a stop string that spans a token boundary and never emits text past it', async () => {
    const base = await ctx.complete({ prompt: 'Stop test', maxTokens: 30, temperature: 0, emitTokenIds: true, logitBias: noEos });
    const pieces = Array.from(base.tokens!, (t) => Buffer.from(model.tokenPiece(t)).toString('utf8'));
    // A stop string made of the end of one piece and the start of the next.
    let k = pieces.findIndex((p, i) => i > 2 && p.length >= 2 && (pieces[i + 1]?.length ?? 0) >= 2);
    expect(k).toBeGreaterThan(0);
    const stop = pieces[k]!.slice(-2) + pieces[k + 1]!.slice(0, 2);
    const expectedText = base.text.slice(0, base.text.indexOf(stop));
    const events = await collect(ctx.generate({ prompt: 'Stop test', maxTokens: 30, temperature: 0, stop: ['never-matches-xyz', stop], logitBias: noEos }));
    const final = events.at(-1)!;
    if (final.type !== 'final') throw new Error('no final');
    expect(final.finishReason).toBe('stop');
    expect(final.stop).toBe(stop);
    expect(final.text).toBe(expectedText);
    for (const ev of events) if (ev.type === 'text') expect(ev.text).not.toContain(stop.slice(0, 3));
  });

  it('never splits a UTF-8 character across text events (grammar forces byte-fallback tokens)', async () => {
    const target = '🎉 ok 中文 ✓';
    const events = await collect(ctx.generate({ prompt: 'x', temperature: 0, emitTokenIds: true, grammar: `root ::= ${JSON.stringify(target)}` }));
    const final = events.at(-1)!;
    if (final.type !== 'final') throw new Error('no final');
    expect(final.text).toBe(target);
    expect(final.finishReason).toBe('eog');
    const texts = events.filter((e) => e.type === 'text');
    for (const ev of texts) {
      expect(ev.text).not.toContain('\uFFFD');
      expect(Buffer.from(ev.text, 'utf8').toString('utf8')).toBe(ev.text);
    }
    // The emoji came from several byte tokens in one event.
    expect(texts.some((e) => e.text === '🎉' && e.tokens?.length === 4)).toBe(true);
    expect(texts.flatMap((e) => Array.from(e.tokens ?? []))).toEqual(Array.from(final.tokens!));
  });

  it('applies logit bias', async () => {
    const forced = model.tokenize('banana', { addSpecial: false })[0]!;
    const r = await ctx.complete({ prompt: 'Fruit:', maxTokens: 3, temperature: 0, emitTokenIds: true, logitBias: { [forced]: 100 } });
    expect(Array.from(r.tokens!)).toEqual([forced, forced, forced]);
  });

  it('rejects a malformed grammar with INVALID_ARGUMENT', async () => {
    const e = await rejection(ctx.complete({ prompt: 'x', grammar: 'root ::= ("unclosed' }));
    expect(e.code).toBe('INVALID_ARGUMENT');
    expect(e.message).toMatch(/grammar/);
  });

  it('fails a request whose grammar allows no token with GRAMMAR_FAILED, and keeps running', async () => {
    // a grammar made only of the end-of-sequence token: llama.cpp refuses EOG before the grammar completes
    const e = await rejection(ctx.complete({ prompt: 'hello', maxTokens: 4, temperature: 0, grammar: `root ::= <[${model.vocab.eos}]>` }));
    expect(e.code).toBe('GRAMMAR_FAILED');
    const after = await ctx.complete({ prompt: 'hello', maxTokens: 3, temperature: 0, logitBias: noEos });
    expect(after.generatedTokens).toBe(3);
  });

  it('ends with length at the end of the context', async () => {
    const small = await model.createContext({ contextSize: 256 });
    const prompt = model.tokenize('one two three four five');
    const r = await small.complete({ prompt, temperature: 0, logitBias: noEos });
    expect(r.finishReason).toBe('length');
    expect(small.settings.sequenceContextSize).toBe(256);
    expect(r.generatedTokens).toBe(256 - prompt.length);
    await small.dispose();
  });

  it('rejects a prompt larger than the context with CONTEXT_OVERFLOW before decoding', async () => {
    const small = await model.createContext({ contextSize: 256 });
    const prompt = 'word '.repeat(300);
    const e = await rejection(small.complete({ prompt }));
    expect(e.code).toBe('CONTEXT_OVERFLOW');
    expect(e.message).toContain(`has ${model.tokenize(prompt).length} tokens but a sequence of this context holds 256`);
    const ok = await small.complete({ prompt: 'fine', maxTokens: 2, temperature: 0 });
    expect(ok.generatedTokens).toBeGreaterThan(0);
    await small.dispose();
  });

  it('validates options with INVALID_ARGUMENT naming the option', () => {
    expect(() => ctx.generate({ prompt: 'x', temperature: -1 })).toThrow(/temperature/);
    expect(() => ctx.generate({ prompt: 'x', maxTokns: 3 } as never)).toThrow(/unknown option "maxTokns"/);
    expect(() => ctx.generate({ prompt: 42 } as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => ctx.generate({ prompt: [1, 99999999] })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/outside the vocabulary/) }));
  });

  it('rejects with ABORTED when the signal is aborted before the request starts', async () => {
    const ac = new AbortController();
    ac.abort(new Error('nope'));
    const gen = ctx.generate({ prompt: 'x', signal: ac.signal });
    const e = await rejection(collect(gen));
    expect(e.code).toBe('ABORTED');
    expect(e.name).toBe('AbortError');
    expect((e.cause as Error).message).toBe('nope');
  });

  it('ends the iterator with ABORTED when the signal fires during decoding, and keeps working', async () => {
    const ac = new AbortController();
    const gen = ctx.generate({ prompt: 'Long story', maxTokens: 100_000, temperature: 0, logitBias: noEos, signal: ac.signal });
    let texts = 0;
    const e = await rejection((async () => {
      for await (const ev of gen) {
        if (ev.type === 'text' && ++texts === 5) ac.abort();
      }
    })());
    expect(e.code).toBe('ABORTED');
    expect(texts).toBeGreaterThanOrEqual(5);
    expect((await rejection(gen.result)).code).toBe('ABORTED');
    const after = await ctx.complete({ prompt: 'still alive', maxTokens: 4, temperature: 0, logitBias: noEos });
    expect(after.generatedTokens).toBe(4);
  });

  it('aborts during a long chunked prefill', async () => {
    const slow = await model.createContext({ contextSize: 8192, prefillChunk: 8 });
    const ac = new AbortController();
    const prompt = model.tokenize('alpha beta gamma delta '.repeat(400));
    const gen = slow.generate({ prompt, maxTokens: 4, signal: ac.signal });
    setTimeout(() => ac.abort(), 5);
    const e = await rejection(gen.result);
    expect(e.code).toBe('ABORTED');
    const r = await slow.complete({ prompt: 'after', maxTokens: 3, temperature: 0, logitBias: noEos });
    expect(r.generatedTokens).toBe(3);
    await slow.dispose();
  });

  it('survives 100 random aborts among 50 concurrent requests', async () => {
    const busy = await model.createContext({ contextSize: 4096, sequences: 8 });
    const reference = await busy.complete({ prompt: 'steady prompt', maxTokens: 10, temperature: 0, logitBias: noEos });
    let seed = 12345;
    const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
    const controllers: AbortController[] = [];
    const runs = Array.from({ length: 50 }, (_, i) => {
      const ac = new AbortController();
      controllers.push(ac);
      return busy.complete({ prompt: `request number ${i}`, maxTokens: 20 + (i % 7) * 10, temperature: 0, logitBias: noEos, signal: ac.signal });
    });
    for (let k = 0; k < 100; k++) {
      const ac = controllers[Math.floor(rand() * controllers.length)]!;
      setTimeout(() => ac.abort(), Math.floor(rand() * 40));
    }
    const settled = await Promise.allSettled(runs);
    for (const s of settled) {
      if (s.status === 'rejected') expect((s.reason as LlamuxError).code).toBe('ABORTED');
      else expect(s.value.finishReason).toBe('length');
    }
    expect(settled.some((s) => s.status === 'rejected')).toBe(true);
    const again = await busy.complete({ prompt: 'steady prompt', maxTokens: 10, temperature: 0, logitBias: noEos });
    expect(again.text).toBe(reference.text);
    expect(busy.pendingRequests).toBe(0);
    await busy.dispose();
  });

  it('preempts the youngest request when the running batch outgrows the KV cache; every request finishes', async () => {
    // 4 × (prompt + 200) tokens in 256 shared cells: they cannot all hold their KV at once.
    // (Exact outputs across a preemption are checked on a scripted model in concurrency.generate.)
    const full = await model.createContext({ contextSize: 256, sequences: 4 });
    const streamed = [0, 1, 2, 3].map(() => [] as number[]);
    const runs = streamed.map(async (mine, i) => {
      for await (const ev of full.generate({ prompt: `sequence ${i}`, maxTokens: 200, temperature: 0, logitBias: noEos, emitTokenIds: true })) {
        if (ev.type === 'text') mine.push(...(ev.tokens ?? []));
        if (ev.type === 'final') return ev;
      }
      throw new Error('no final event');
    });
    const results = await Promise.all(runs);
    results.forEach((r, i) => {
      expect(r.generatedTokens).toBe(200);
      expect(r.finishReason).toBe('length');
      expect(streamed[i]).toEqual(Array.from(r.tokens ?? [])); // nothing repeated or skipped
    });
    expect(full.cacheStats().preemptions).toBeGreaterThan(0);
    const after = await full.complete({ prompt: 'fits now', maxTokens: 5, temperature: 0, logitBias: noEos });
    expect(after.generatedTokens).toBe(5);
    await full.dispose();
  });

  it('throws QUEUE_FULL when more requests wait than maxQueued allows', async () => {
    const q = await model.createContext({ contextSize: 512, sequences: 1, maxQueued: 2 });
    const running = [0, 1, 2].map(() => q.generate({ prompt: 'x', maxTokens: 200, logitBias: noEos }));
    expect(() => q.generate({ prompt: 'x' })).toThrow(expect.objectContaining({ code: 'QUEUE_FULL' }));
    const results = await Promise.all(running.map((g) => g.result));
    expect(results.every((r) => r.generatedTokens === 200)).toBe(true);
    const ok = await q.complete({ prompt: 'x', maxTokens: 1 });
    expect(ok.generatedTokens).toBeLessThanOrEqual(1);
    await q.dispose();
  });

  it('pauses only the sequence whose consumer stops reading', async () => {
    const bp = await model.createContext({ contextSize: 4096, sequences: 2 });
    const slow = bp.generate({ prompt: 'slow reader', maxTokens: 1500, temperature: 0, logitBias: noEos, highWaterMark: 8 });
    const it = slow[Symbol.asyncIterator]();
    await it.next(); // start iterating, then stop reading
    const fast = await bp.complete({ prompt: 'fast reader', maxTokens: 600, temperature: 0, logitBias: noEos });
    expect(fast.generatedTokens).toBe(600);
    await new Promise((r) => setTimeout(r, 100));
    // Bounded: the paused request buffered about highWaterMark events, not hundreds.
    expect(slow.bufferedEvents).toBeLessThan(64);
    expect(slow.done).toBe(false);
    let rest = 0;
    for (let r = await it.next(); !r.done; r = await it.next()) rest++;
    const final = await slow.result;
    expect(final.generatedTokens).toBe(1500);
    expect(rest).toBeGreaterThan(0);
    await bp.dispose();
  });

  it('breaking out of the iteration cancels the request', async () => {
    const gen = ctx.generate({ prompt: 'break me', maxTokens: 100_000, temperature: 0, logitBias: noEos });
    for await (const ev of gen) {
      if (ev.type === 'text') break;
    }
    expect((await rejection(gen.result)).code).toBe('ABORTED');
  });

  it('dispose() ends running and queued requests with DISPOSED and refuses new ones', async () => {
    const d = await model.createContext({ contextSize: 1024, sequences: 1 });
    const a = d.generate({ prompt: 'running', maxTokens: 100_000, logitBias: noEos });
    const b = d.generate({ prompt: 'queued', maxTokens: 10 });
    await new Promise((r) => setTimeout(r, 20));
    await d.dispose();
    expect((await rejection(a.result)).code).toBe('DISPOSED');
    expect((await rejection(b.result)).code).toBe('DISPOSED');
    expect(() => d.generate({ prompt: 'x' })).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
    await d.dispose(); // idempotent
  });

  it('model.dispose() disposes its contexts first', async () => {
    const m2 = await loadModel(tinyModelPath);
    const c2 = await m2.createContext({ contextSize: 256 });
    const g = c2.generate({ prompt: 'x', maxTokens: 100_000, logitBias: noEos });
    await m2.dispose();
    expect(c2.disposed).toBe(true);
    expect((await rejection(g.result)).code).toBe('DISPOSED');
  });
});
