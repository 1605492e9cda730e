import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamuxError, Session, loadModel, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

async function rejection(p: Promise<unknown>): Promise<LlamuxError> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e).toBeInstanceOf(LlamuxError);
  return e as LlamuxError;
}

describe('Session objects: ctx.createSession() (tiny Llama 2 model)', () => {
  let model: Model;
  let noEos: Record<string, number>;
  const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => ['alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta'][(i * 7 + seed) % 6]).join(' ');

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    noEos = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('generate() pins a sequence, continue() prefills only the tail, stats() counts both', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 2 });
    const chat = ctx.createSession({ id: 'chat' });
    expect(chat).toBeInstanceOf(Session);
    expect(chat.id).toBe('chat');
    const p1 = model.tokenize(words(30, 3));
    const t1 = await chat.generate({ prompt: p1, maxTokens: 5, temperature: 0, emitTokenIds: true, logitBias: noEos }).result;
    expect(ctx.cacheStats()).toMatchObject({ sessions: 1, pinnedSequences: 1 });
    const committed = [...p1, ...t1.tokens!];
    expect(chat.stats()).toMatchObject({ id: 'chat', requests: 1, committedTokens: committed.length, generatedTokens: 5, running: false, ended: false });
    const tail = model.tokenize(' next part', { addSpecial: false });
    const t2 = await chat.continue(tail, { maxTokens: 4, temperature: 0, logitBias: noEos, expectCommitted: committed }).result;
    expect(t2.cache.outcome).toBe('sticky');
    expect(t2.prefilledTokens).toBe(tail.length + 1);
    expect(chat.stats()).toMatchObject({ requests: 2, committedTokens: committed.length + tail.length + 4, lastCacheOutcome: 'sticky' });
    expect(chat.stats().prefilledTokens).toBe(t1.prefilledTokens + t2.prefilledTokens);
    // sessionId on the context is the same session (sugar), and is counted too.
    const t3 = await ctx.complete({ prompt: Int32Array.from([...committed, ...tail, ...t2.tokens ?? []]), maxTokens: 2, logitBias: noEos, sessionId: 'chat' });
    expect(t3.cache.outcome).not.toBe('cold');
    expect(chat.stats().requests).toBe(3);
    await chat.end();
    expect(chat.ended).toBe(true);
    expect(ctx.cacheStats()).toMatchObject({ sessions: 0, pinnedSequences: 0 });
    expect(() => chat.generate({ prompt: 'x' })).toThrow(/has ended/);
    await chat.end(); // idempotent
    await ctx.dispose();
  });

  it('fork() starts a new session from the same KV and committed tokens', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 3 });
    const orig = ctx.createSession();
    expect(orig.id).toMatch(/^[0-9a-f-]{36}$/);
    const p1 = model.tokenize(words(40, 4));
    const t1 = await orig.generate({ prompt: p1, maxTokens: 5, temperature: 0, emitTokenIds: true, logitBias: noEos }).result;
    const copy = await orig.fork({ id: 'copy' });
    expect(copy.id).toBe('copy');
    expect(copy.stats().committedTokens).toBe(p1.length + 5);
    const tail = model.tokenize(' branch', { addSpecial: false });
    const a = await copy.continue(tail, { maxTokens: 4, temperature: 0, logitBias: noEos }).result;
    const b = await orig.continue(tail, { maxTokens: 4, temperature: 0, logitBias: noEos }).result;
    expect(a.cache.outcome).toBe('sticky');
    expect(a.reusedTokens).toBe(p1.length + t1.tokens!.length - 1);
    expect(a.text).toBe(b.text);
    expect(ctx.cacheStats().sessions).toBe(2);
    // A fork onto an id that is in use fails, and the id stays usable by its owner.
    expect(() => ctx.createSession({ id: 'copy' })).toThrow(/already in use/);
    await copy.end();
    const again = ctx.createSession({ id: 'copy' });
    await again.end();
    await orig.end();
    await ctx.dispose();
  });

  it('reports SESSION_BUSY for a second request, and waits with waitForSession', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 2 });
    const s = ctx.createSession();
    const long = s.generate({ prompt: 'busy session', maxTokens: 200, temperature: 0, logitBias: noEos });
    expect(s.stats().running).toBe(true);
    expect((await rejection(s.generate({ prompt: 'again', maxTokens: 2 }).result)).code).toBe('SESSION_BUSY');
    const waited = await s.generate({ prompt: 'busy session again', maxTokens: 2, waitForSession: true, logitBias: noEos }).result;
    expect((await long.result).generatedTokens).toBe(200);
    expect(waited.generatedTokens).toBe(2);
    expect(s.stats()).toMatchObject({ requests: 2, running: false });
    await ctx.dispose();
  });

  it('session commands keep their place in the queue: fork waits for a running request, end runs after it', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 3 });
    const s = ctx.createSession({ id: 'src' });
    const running = s.generate({ prompt: 'fork me while I run', maxTokens: 60, temperature: 0, logitBias: noEos });
    expect((await rejection(s.fork({ id: 'busy-copy' }))).code).toBe('SESSION_BUSY');
    const copy = await s.fork({ id: 'waited-copy', wait: true }); // answered after the request ends
    const r = await running.result;
    expect(copy.stats().committedTokens).toBe(r.promptTokens + r.generatedTokens);
    const again = s.generate({ prompt: 'one more', maxTokens: 30, logitBias: noEos });
    const ended = s.end(); // the session ends once the running request finishes
    expect((await again.result).generatedTokens).toBe(30);
    await ended;
    expect(ctx.cacheStats().sessions).toBe(1); // the copy
    await copy.end();
    const pending = rejection(ctx.forkSession('nope', 'x'));
    await ctx.dispose();
    expect(['INVALID_ARGUMENT', 'DISPOSED']).toContain((await pending).code);
    expect((await rejection(ctx.endSession('x'))).code).toBe('DISPOSED');
  });

  it('a session ttlMs overrides the context sessionTtlMs', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 2, sessionTtlMs: 3_600_000 });
    const short = ctx.createSession({ ttlMs: 100 });
    const long = ctx.createSession();
    await short.generate({ prompt: 'expire me', maxTokens: 2, logitBias: noEos }).result;
    await long.generate({ prompt: 'keep me', maxTokens: 2, logitBias: noEos }).result;
    expect(ctx.cacheStats().sessions).toBe(2);
    await new Promise((r) => setTimeout(r, 1100));
    await ctx.complete({ prompt: 'tick', maxTokens: 1, logitBias: noEos });
    expect(ctx.cacheStats().sessions).toBe(1);
    expect((await rejection(short.continue(' more', { maxTokens: 1 }).result)).code).toBe('INVALID_ARGUMENT');
    await ctx.dispose();
  });

  it('an idle session expires on the engine clock, with no request arriving to trigger it', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 2, sessionTtlMs: 3_600_000 });
    const s = ctx.createSession({ ttlMs: 200 });
    await s.generate({ prompt: 'expire on my own', maxTokens: 2, logitBias: noEos }).result;
    expect(ctx.cacheStats().sessions).toBe(1);
    expect(ctx.cacheStats().pinnedSequences).toBe(1);
    const deadline = Date.now() + 5000;
    while (ctx.cacheStats().sessions > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(ctx.cacheStats().sessions).toBe(0);
    expect(ctx.cacheStats().pinnedSequences).toBe(0);
    await ctx.dispose();
  });

  it('validates its options and cannot be constructed directly', async () => {
    const ctx = await model.createContext({ contextSize: 512 });
    expect(() => ctx.createSession({ ttl: 5 } as never)).toThrow(LlamuxError);
    expect(() => ctx.createSession({ id: '' })).toThrow(/session options/);
    expect(() => ctx.createSession({ ttlMs: -1 })).toThrow(LlamuxError);
    const Ctor = Session as unknown as new (...args: unknown[]) => Session;
    expect(() => new Ctor(Symbol('x'), ctx, 'id', undefined)).toThrow(/createSession/);
    await ctx.dispose();
    expect(() => ctx.createSession()).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
  });
});
