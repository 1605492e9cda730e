// Concurrency stress (issue 9): 200 concurrent greedy requests on 4 contexts × 2 sequences of the
// `long-script` model, with random aborts (pre-aborted signals, timed aborts, aborts on the n-th
// event, cancel(), breaking out of the iterator), slow consumers that pause their sequence, and
// two contexts disposed mid-flight; about one request in eight shares a session (and waits for it). Every request must settle, either with exactly the output of
// the same request run alone, or with a LlamuxError ABORTED / DISPOSED that it earned; partial
// output streamed before a failure is a prefix of the right output.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamuxError, loadModel, setLogger, type Context, type GenerateEvent, type GenerateOptions, type GenerateResult, type Generation, type Model } from '../../src/index.js';
import { Prng } from '../../src/gguf/prng.js';
import { ONE_THREAD, script, testModel } from '../helpers/models.js';

/** A seeded PRNG (the project's mulberry32), so a failing round can be replayed from its seed. */
function prng(seed: number): () => number {
  const p = new Prng(seed);
  return () => p.next();
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

type Mode = 'result' | 'iterate' | 'slow';
type Fault = 'none' | 'preAbort' | 'abortAfterMs' | 'abortOnEvent' | 'cancelOnEvent' | 'breakOnEvent';

interface Spec {
  i: number;
  ctx: number;
  offset: number;
  maxTokens?: number;
  stop?: string[];
  mode: Mode;
  fault: Fault;
  /** ms for abortAfterMs, event count for the *OnEvent faults. */
  at: number;
  wave: number;
  /** A session shared with a few other requests of the same context (they queue on it). */
  session?: string;
}

interface Outcome {
  spec: Spec;
  result?: GenerateResult;
  error?: unknown;
  /** Text events seen by an iterating consumer (tokens). */
  streamed: number[];
  streamedText: string;
  lastEvent?: GenerateEvent['type'];
  /** An abort or cancel was issued for this request. */
  abortIssued: boolean;
  /** Its context was disposed before it settled. */
  ctxDisposed: boolean;
  /** generate() itself threw (context already disposed). */
  threw: boolean;
}

const CONTEXTS = 4;
const SEQUENCES = 2;
const REQUESTS = 200;
const WAVES = 5;

function makeSpecs(rand: () => number, scriptLength: number): Spec[] {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  return Array.from({ length: REQUESTS }, (_, i) => {
    const offset = Math.floor(rand() * (scriptLength - 10));
    const r = rand();
    const fault: Fault = r < 0.55 ? 'none' : r < 0.62 ? 'preAbort' : r < 0.72 ? 'abortAfterMs' : r < 0.82 ? 'abortOnEvent' : r < 0.92 ? 'cancelOnEvent' : 'breakOnEvent';
    const mode: Mode = fault === 'breakOnEvent' ? pick(['iterate', 'slow'] as const) : pick(['result', 'result', 'iterate', 'slow'] as const);
    const spec: Spec = {
      i,
      ctx: Math.floor(rand() * CONTEXTS),
      offset,
      mode,
      fault,
      at: fault === 'abortAfterMs' ? Math.floor(rand() * 60) : 1 + Math.floor(rand() * 6),
      wave: Math.floor(rand() * WAVES),
    };
    // Mostly bounded requests; some run to the end of the script (EOG), some stop on a landmark.
    if (offset < scriptLength - 90 || rand() < 0.5) spec.maxTokens = 4 + Math.floor(rand() * 76);
    if (rand() < 0.15) spec.stop = [' Stop here', ' This is'];
    if (rand() < 0.12) spec.session = `stress-${spec.ctx}-${i % 3}`;
    return spec;
  });
}

function optionsOf(prompt: readonly number[], greedy: readonly number[], s: Spec): GenerateOptions {
  const o: GenerateOptions = { prompt: [...prompt, ...greedy.slice(0, s.offset)], temperature: 0, emitTokenIds: true };
  if (s.maxTokens !== undefined) o.maxTokens = s.maxTokens;
  if (s.stop) o.stop = s.stop;
  if (s.mode === 'slow') o.highWaterMark = 2;
  if (s.session) {
    o.sessionId = s.session;
    o.waitForSession = true;
  }
  return o;
}

const keyOf = (s: Spec) => JSON.stringify([s.offset, s.maxTokens ?? null, s.stop ?? null]);
const ids = (r: GenerateResult) => Array.from(r.tokens ?? []);
const view = (r: GenerateResult) => ({ tokens: ids(r), text: r.text, finishReason: r.finishReason, stop: r.stop, generatedTokens: r.generatedTokens });

describe('concurrency stress: 200 requests, 8 sequences, random aborts and disposals', () => {
  const s = script('long-script');
  let model: Model;
  let reference: Context;
  const refCache = new Map<string, GenerateResult>();
  const totals = { requests: 0, ok: 0, aborted: 0, disposed: 0, disposedMidFlight: 0, threw: 0, abortsIssued: 0, contextsDisposed: 0 };
  const llamaErrors: string[] = [];

  beforeAll(async () => {
    // An abort trips llama.cpp's abort callback, which logs a failed decode: keep them, quietly.
    setLogger('error', (_level, message) => llamaErrors.push(message));
    model = await loadModel(testModel('long-script').path);
    // One sequence, requests one at a time: the sequential runs the concurrent ones must equal.
    reference = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, toolCallMarkers: false });
  });
  afterAll(async () => {
    await reference?.dispose();
    await model?.dispose();
    console.log(`stress totals: ${JSON.stringify(totals)}; llama.cpp error lines (aborted decodes): ${llamaErrors.length}`);
    setLogger('warn');
  });

  async function sequential(spec: Spec): Promise<GenerateResult> {
    const k = keyOf(spec);
    let r = refCache.get(k);
    if (!r) {
      const { session: _session, ...alone } = spec;
      r = await reference.complete(optionsOf(s.promptTokens, s.greedy, { ...alone, mode: 'result' }));
      refCache.set(k, r);
    }
    return r;
  }

  it.each([1, 2, 3, 4, 5])('round with seed %i: every request settles with its sequential output or a typed error it earned', async (seed) => {
    const rand = prng(seed);
    const specs = makeSpecs(rand, s.greedy.length);
    const contexts = await Promise.all(
      Array.from({ length: CONTEXTS }, () => model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: SEQUENCES, toolCallMarkers: false })),
    );
    const disposedAt: Array<boolean> = contexts.map(() => false);
    const disposals: Promise<void>[] = [];
    const disposeCtx = (c: number) => {
      if (disposedAt[c]) return;
      disposedAt[c] = true;
      disposals.push(contexts[c]!.dispose());
    };
    // Context 2 is disposed on its 40th text event (certainly mid-flight: it has ~50 requests
    // for 2 sequences); context 3 on a timer; contexts 0 and 1 survive.
    let ctx2Events = 0;
    const timerDisposal = setTimeout(() => disposeCtx(3), 20 + Math.floor(rand() * 100));
    const outcomes: Outcome[] = specs.map((spec) => ({ spec, streamed: [], streamedText: '', abortIssued: false, ctxDisposed: false, threw: false }));
    const timers: NodeJS.Timeout[] = [];

    const runOne = async (o: Outcome): Promise<void> => {
      const { spec } = o;
      const ctx = contexts[spec.ctx]!;
      const ac = new AbortController();
      const options = optionsOf(s.promptTokens, s.greedy, spec);
      if (spec.fault !== 'cancelOnEvent' && spec.fault !== 'breakOnEvent') options.signal = ac.signal;
      const abort = () => {
        o.abortIssued = true;
        ac.abort(new Error(`stress abort ${spec.i}`));
      };
      if (spec.fault === 'preAbort') abort();
      let gen: Generation;
      try {
        gen = ctx.generate(options);
      } catch (e) {
        o.threw = true;
        o.error = e;
        o.ctxDisposed = disposedAt[spec.ctx]!;
        return;
      }
      if (spec.fault === 'abortAfterMs') timers.push(setTimeout(abort, spec.at));
      const onText = (ev: GenerateEvent): 'break' | undefined => {
        if (ev.type !== 'text') return undefined;
        o.streamed.push(...(ev.tokens ?? []));
        o.streamedText += ev.text;
        if (spec.ctx === 2 && ++ctx2Events === 40) disposeCtx(2);
        const n = o.streamed.length;
        if (spec.fault === 'abortOnEvent' && n >= spec.at && !o.abortIssued) abort();
        if (spec.fault === 'cancelOnEvent' && n >= spec.at && !o.abortIssued) {
          o.abortIssued = true;
          gen.cancel();
        }
        if (spec.fault === 'breakOnEvent' && n >= spec.at) {
          o.abortIssued = true;
          return 'break';
        }
        return undefined;
      };
      try {
        if (spec.mode === 'result' && (spec.fault === 'abortOnEvent' || spec.fault === 'cancelOnEvent')) {
          // A result-only consumer that still watches the stream (iterating is what gives events).
          for await (const ev of gen) {
            o.lastEvent = ev.type;
            onText(ev);
          }
        } else if (spec.mode === 'result') {
          await gen.result;
        } else {
          for await (const ev of gen) {
            o.lastEvent = ev.type;
            if (onText(ev) === 'break') break;
            if (spec.mode === 'slow') await sleep(1 + (spec.i % 3));
          }
        }
        o.result = await gen.result;
      } catch (e) {
        o.error = e;
      }
      expect(gen.done).toBe(true);
      o.ctxDisposed = disposedAt[spec.ctx]!;
    };

    const started = Date.now();
    const running: Promise<void>[] = [];
    for (let w = 0; w < WAVES; w++) {
      for (const o of outcomes) if (o.spec.wave === w) running.push(runOne(o));
      await sleep(Math.floor(rand() * 12));
    }
    let deadline: NodeJS.Timeout | undefined;
    const settled = await Promise.race([
      Promise.all(running).then(() => true),
      new Promise<false>((r) => {
        deadline = setTimeout(() => r(false), 40_000);
      }),
    ]);
    clearTimeout(deadline);
    clearTimeout(timerDisposal);
    for (const t of timers) clearTimeout(t);
    const unsettled = outcomes.filter((o) => o.result === undefined && o.error === undefined).map((o) => o.spec.i);
    expect(settled, `requests that never settled: ${unsettled.join(', ')}`).toBe(true);
    // Both disposals happened and finished.
    disposeCtx(3);
    await Promise.all(disposals);
    const elapsed = Date.now() - started;

    // Every failure is a LlamuxError it earned.
    for (const o of outcomes) {
      const { spec } = o;
      if (o.error === undefined) continue;
      const e = o.error as LlamuxError;
      expect(e, `request ${spec.i}: ${String(e)}`).toBeInstanceOf(LlamuxError);
      expect(['ABORTED', 'DISPOSED'], `request ${spec.i}: ${e.code} ${e.message}`).toContain(e.code);
      if (e.code === 'ABORTED') {
        expect(o.abortIssued, `request ${spec.i} ABORTED without an abort`).toBe(true);
        expect(e.name).toBe('AbortError');
        if (viaSignal(spec)) expect((e.cause as Error | undefined)?.message).toBe(`stress abort ${spec.i}`);
      }
      if (e.code === 'DISPOSED') expect(o.ctxDisposed, `request ${spec.i} DISPOSED on a live context`).toBe(true);
      if (o.threw) expect(e.code).toBe('DISPOSED');
    }
    // A pre-aborted signal always ends ABORTED; requests that nothing disturbed always succeed.
    for (const o of outcomes) {
      if (o.spec.fault === 'preAbort' && !o.threw) expect((o.error as LlamuxError | undefined)?.code, `request ${o.spec.i}`).toBe('ABORTED');
      if (!o.abortIssued && !o.ctxDisposed) expect(o.error, `request ${o.spec.i} failed undisturbed`).toBeUndefined();
    }

    // Survivors equal their sequential runs, and both equal the script.
    const ok = outcomes.filter((o) => o.result !== undefined);
    for (const o of ok) {
      const ref = await sequential(o.spec);
      expect(view(o.result!), `request ${o.spec.i} (offset ${o.spec.offset})`).toEqual(view(ref));
      expect(ids(o.result!)).toEqual(s.greedy.slice(o.spec.offset, o.spec.offset + o.result!.generatedTokens));
      if (o.spec.mode !== 'result' || o.spec.fault === 'abortOnEvent' || o.spec.fault === 'cancelOnEvent') {
        // An iterating consumer saw exactly the result, ending with the final event.
        if (o.lastEvent !== undefined && o.spec.fault !== 'breakOnEvent') {
          expect(o.lastEvent).toBe('final');
          expect(o.streamed).toEqual(ids(o.result!));
          expect(o.streamedText).toBe(o.result!.text);
        }
      }
    }
    // What a failed request streamed before it failed is a prefix of the right output.
    for (const o of outcomes) {
      if (o.error === undefined || o.streamed.length === 0) continue;
      const ref = await sequential(o.spec);
      expect(o.streamed, `partial output of request ${o.spec.i}`).toEqual(ids(ref).slice(0, o.streamed.length));
      expect(ref.text.startsWith(o.streamedText)).toBe(true);
    }

    // The surviving contexts are idle and still exact; the disposed ones refuse work.
    for (const [c, ctx] of contexts.entries()) {
      if (disposedAt[c]) {
        expect(ctx.disposed).toBe(true);
        expect(() => ctx.generate({ prompt: [1] })).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
        continue;
      }
      expect(ctx.pendingRequests).toBe(0);
      const after = await ctx.complete({ prompt: [...s.promptTokens, ...s.greedy.slice(0, 100)], temperature: 0, emitTokenIds: true, maxTokens: 30 });
      expect(ids(after)).toEqual(s.greedy.slice(100, 130));
      const stats = ctx.cacheStats();
      expect(stats.ramBytes).toBeLessThanOrEqual(stats.ramBudget);
      await ctx.dispose();
    }

    const count = (code: string) => outcomes.filter((o) => (o.error as LlamuxError | undefined)?.code === code).length;
    const round = {
      seed,
      ms: elapsed,
      requests: outcomes.length,
      ok: ok.length,
      aborted: count('ABORTED'),
      disposed: count('DISPOSED'),
      threwDisposed: outcomes.filter((o) => o.threw).length,
      disposedMidFlight: outcomes.filter((o) => !o.threw && (o.error as LlamuxError | undefined)?.code === 'DISPOSED').length,
      abortsIssued: outcomes.filter((o) => o.abortIssued).length,
      sessionRequests: outcomes.filter((o) => o.spec.session).length,
    };
    console.log(`stress round ${JSON.stringify(round)}`);
    totals.requests += round.requests;
    totals.ok += round.ok;
    totals.aborted += round.aborted;
    totals.disposed += round.disposed;
    totals.threw += round.threwDisposed;
    totals.disposedMidFlight += round.disposedMidFlight;
    totals.abortsIssued += round.abortsIssued;
    totals.contextsDisposed += 2;
    expect(round.ok + round.aborted + round.disposed).toBe(REQUESTS);
    // The round really exercised all three outcomes.
    expect(round.ok).toBeGreaterThanOrEqual(40);
    expect(round.aborted).toBeGreaterThanOrEqual(10);
    expect(round.disposed).toBeGreaterThanOrEqual(10);
    expect(round.disposedMidFlight).toBeGreaterThanOrEqual(5);
  });
});

/** Whether the request's abort went through its AbortSignal (its error's cause is the reason). */
function viaSignal(spec: Spec): boolean {
  return spec.fault === 'preAbort' || spec.fault === 'abortAfterMs' || spec.fault === 'abortOnEvent';
}
