// The stored responses: bounds, tenants, persistence beside the tool-call store, and a store
// that fails (a real SQLite error: its table dropped under the server) — the server keeps
// answering, and only what it truly lost is a 404.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, ResponseStore, ToolCallStore, type LlamuxServer, type StoredResponse } from '../../src/server/index.js';
import { tempDir } from '../helpers/paths.js';
import { openaiFor } from './clients.js';
import { ANSWER, QUESTION, WEATHER_RESULT, ensureChatModels } from './fixtures.js';
import { RESPONSE_TOOLS } from './responses-fixtures.js';

const scratch: string[] = [];
function scratchDir(name: string): string {
  const d = tempDir(name);
  scratch.push(d);
  return d;
}
afterAll(() => {
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});

function row(id: string, over: Partial<StoredResponse> = {}): StoredResponse {
  return { id, tenant: '', conversation: 'conv_1', response: JSON.stringify({ id, output: [] }), input: '[]', createdAt: Date.now(), ...over };
}

describe('ResponseStore', () => {
  it('keeps responses in the tool-call store file, across reopen, each tenant its own', () => {
    const path = join(scratchDir('rstore'), 'store.sqlite');
    const calls = new ToolCallStore(path);
    const a = new ResponseStore(path);
    expect(a.put(row('resp_a', { tenant: 'hdr-alice' }))).toBe(true);
    a.close();
    calls.close();
    const b = new ResponseStore(path);
    const got = b.get('resp_a', 'hdr-alice');
    expect(got).toMatchObject({ id: 'resp_a', tenant: 'hdr-alice', conversation: 'conv_1' });
    expect(b.get('resp_a', 'hdr-bob')).toBeUndefined();
    expect(b.get('resp_a', '')).toBeUndefined();
    expect(b.delete('resp_a', 'hdr-bob')).toBe(false);
    expect(b.delete('resp_a', 'hdr-alice')).toBe(true);
    expect(b.get('resp_a', 'hdr-alice')).toBeUndefined();
    b.close();
    // the tool-call table is untouched by the other connection
    const again = new ToolCallStore(path);
    expect(again.size.rows).toBe(0);
    again.close();
  });

  it('drops the oldest beyond maxRows and maxBytes, and those older than maxAgeMs', () => {
    const s = new ResponseStore(':memory:', { maxRows: 3 });
    const t = Date.now();
    for (let i = 0; i < 5; i++) s.put(row(`r${i}`, { createdAt: t + i }));
    expect(s.size.rows).toBe(3);
    expect(s.get('r1', '')).toBeUndefined();
    expect(s.get('r4', '')).toBeDefined();
    s.close();
    const bytes = new ResponseStore(':memory:', { maxBytes: 1000 });
    for (let i = 0; i < 10; i++) bytes.put(row(`b${i}`, { input: JSON.stringify(['x'.repeat(200)]), createdAt: t + i }));
    expect(bytes.size.bytes).toBeLessThanOrEqual(1000);
    expect(bytes.get('b9', '')).toBeDefined();
    expect(bytes.get('b0', '')).toBeUndefined();
    bytes.close();
    const aged = new ResponseStore(':memory:', { maxAgeMs: 50 });
    aged.put(row('old', { createdAt: t - 1000 }));
    expect(aged.get('old', '')).toBeUndefined();
    aged.close();
  });

  it('reads a row whose JSON does not hold together as a miss', () => {
    const path = join(scratchDir('rstore-torn'), 'store.sqlite');
    const s = new ResponseStore(path);
    s.put(row('resp_t'));
    const db = new Database(path);
    db.prepare("UPDATE responses SET response = '{\"id\": \"resp_t\", \"outp' WHERE id = 'resp_t'").run();
    db.close();
    expect(s.get('resp_t', '')).toBeUndefined();
    s.close();
  });
});

describe('/v1/responses across a restart with the same store file', () => {
  it('a stored response is retrieved and continued by the restarted server', async () => {
    const model = await loadModel((await ensureChatModels()).demo);
    const storePath = join(scratchDir('rstore-restart'), 'store.sqlite');
    try {
      let server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1, storePath });
      const r1 = await openaiFor(server).responses.create({ model: 'demo', input: QUESTION, tools: RESPONSE_TOOLS });
      await server.close();
      server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1, storePath });
      const openai = openaiFor(server);
      try {
        expect((await openai.responses.retrieve(r1.id)).output).toEqual(r1.output);
        const call = r1.output.find((o) => o.type === 'function_call');
        if (call?.type !== 'function_call') throw new Error('expected a call');
        const r2 = await openai.responses.create({ model: 'demo', previous_response_id: r1.id, input: [{ type: 'function_call_output', call_id: call.call_id, output: WEATHER_RESULT }], tools: RESPONSE_TOOLS });
        expect(r2.output_text).toBe(ANSWER);
      } finally {
        await server.close();
      }
    } finally {
      await model.dispose();
    }
  });
});

describe('/v1/responses when the response store fails', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  let storePath: string;
  const logged: string[] = [];

  beforeAll(async () => {
    model = await loadModel((await ensureChatModels()).demo);
    storePath = join(scratchDir('rstore-fault'), 'store.sqlite');
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1, storePath, log: (_level, message) => logged.push(message) });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  it('keeps answering (never a 500); what was lost is a 404 saying why; the Session still continues when the client resends the history', async () => {
    const before = await openai.responses.create({ model: 'demo', input: QUESTION, tools: RESPONSE_TOOLS });
    // Another process drops the table under the server: every statement now fails in SQLite.
    const db = new Database(storePath);
    db.exec('DROP TABLE responses');
    db.close();

    const r1 = await openai.responses.create({ model: 'demo', input: QUESTION, tools: RESPONSE_TOOLS });
    const call = r1.output.find((o) => o.type === 'function_call');
    if (call?.type !== 'function_call') throw new Error('expected a call');
    expect(logged.some((m) => m.includes(`response ${r1.id} is answered but cannot be retrieved`))).toBe(true);
    for (const id of [r1.id, before.id]) {
      await expect(openai.responses.retrieve(id)).rejects.toMatchObject({ status: 404, message: expect.stringMatching(/response store failed/) });
    }
    await expect(openai.responses.create({ model: 'demo', previous_response_id: r1.id, input: [{ type: 'function_call_output', call_id: call.call_id, output: WEATHER_RESULT }] })).rejects.toMatchObject({ status: 404 });
    await expect(openai.responses.delete(r1.id)).rejects.toMatchObject({ status: 503 });
    expect(server.responses.failures).toBeGreaterThan(0);

    // Recomputed from what the client sends: the same Session, its call replayed as exact tokens.
    const r2 = await openai.responses.create({
      model: 'demo',
      input: [{ role: 'user', content: QUESTION }, { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments }, { type: 'function_call_output', call_id: call.call_id, output: WEATHER_RESULT }],
      tools: RESPONSE_TOOLS,
    });
    expect(r2.output_text).toBe(ANSWER);
    expect(r2.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(r1.usage!.input_tokens + r1.usage!.output_tokens);
    // streamed too
    const events: string[] = [];
    for await (const e of await openai.responses.create({ model: 'demo', input: QUESTION, tools: RESPONSE_TOOLS, stream: true })) events.push(e.type);
    expect(events.at(-1)).toBe('response.completed');
  });
});
