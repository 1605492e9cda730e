import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent, loadModel, type Context, type Model } from '../../src/index.js';
import { sessionPool } from '../../src/engine/context.js';
import { SessionPool } from '../../src/engine/session-pool.js';
import { tinyModelPath } from '../helpers/paths.js';

// A conversation id becomes a Session in one place: the context's pool, which the server and
// the Agent share, so both reach the same pinned sequence for the same conversation.
describe('SessionPool (tiny Llama 2 model)', () => {
  let model: Model;
  let ctx: Context;

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    ctx = await model.createContext({ contextSize: 1024, sequences: 2 });
  });
  afterAll(async () => {
    await ctx.dispose();
    await model.dispose();
  });

  it('gives one Session per conversation id and context, and a new one after it ended', async () => {
    const pool = sessionPool(ctx);
    expect(sessionPool(ctx)).toBe(pool);
    const a = pool.get('conv-a');
    expect(pool.get('conv-a')).toBe(a);
    expect(pool.get('conv-b')).not.toBe(a);
    expect(a.id).toBe('conv-a');
    await a.generate({ prompt: 'hello there', maxTokens: 2, temperature: 0 }).result;
    expect(ctx.cacheStats().pinnedSequences).toBeGreaterThanOrEqual(1);
    await a.end();
    const again = pool.get('conv-a');
    expect(again).not.toBe(a);
    expect(again.ended).toBe(false);
  });

  it('keeps at most its bound referenced, the most recent ones', () => {
    const pool = new SessionPool((id) => ctx.createSession({ id }), 3);
    const first = pool.get('p1');
    pool.get('p2');
    pool.get('p3');
    pool.get('p1'); // p1 is the most recent now: p2 goes first
    pool.get('p4');
    expect(pool.size).toBe(3);
    expect(pool.get('p1')).toBe(first);
  });

  it('is the pool the Agent uses: its conversation is the pool\'s Session', async () => {
    const agent = new Agent({ context: ctx, tools: [], maxTurns: 1, generate: { maxTokens: 2, temperature: 0 } });
    const state = agent.createState([{ role: 'user', content: 'hi' }]);
    const s = sessionPool(ctx).get(state.conversationId);
    expect(s.stats().requests).toBe(0);
    await agent.run(state).catch(() => undefined);
    expect(sessionPool(ctx).get(state.conversationId)).toBe(s);
    expect(s.stats().requests).toBeGreaterThanOrEqual(1);
  });
});
