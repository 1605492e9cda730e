import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { MAX_JSON_DEPTH, jsonTextDepth, parseJsonBounded, JsonTooDeepError } from '../../src/json-limits.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { QUESTION, ensureChatModels } from './fixtures.js';

const nested = (depth: number): string => '['.repeat(depth) + ']'.repeat(depth);

describe('JSON nesting bound', () => {
  it('measures nesting outside strings, escapes included', () => {
    expect(jsonTextDepth('{"a": [1, {"b": "[[[{{{"}]}')).toBe(3);
    expect(jsonTextDepth('"\\"[["')).toBe(0);
    expect(jsonTextDepth(nested(300), 256)).toBe(257); // stops just past the limit
    expect(parseJsonBounded(nested(MAX_JSON_DEPTH))).toBeInstanceOf(Array);
    expect(() => parseJsonBounded(nested(MAX_JSON_DEPTH + 1))).toThrow(JsonTooDeepError);
  });
});

// Client JSON nested thousands deep answered 500 ("Maximum call stack size exceeded") where a
// recursive walk met it; it is a 400 naming what was too deep, and the server goes on.
describe('the server and deeply nested client JSON', () => {
  let model: Model;
  let server: LlamuxServer;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 1, threads: 1 });
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  const post = async (path: string, body: string) => {
    const r = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }, body });
    return { status: r.status, body: (await r.json()) as { error?: { message?: string } } };
  };

  it('answers 400 to an Anthropic tool_use input nested 5,000 deep', async () => {
    const body = `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":${nested(5000)}}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}]}`;
    const r = await post('/v1/messages', body);
    expect(r.status).toBe(400);
    expect(r.body.error?.message).toMatch(/deeper than 256 levels/);
  });

  it('answers 400 to an OpenAI tool-call arguments string nested 20,000 deep, naming the field', async () => {
    const args = JSON.stringify(`{"a":${nested(20_000)}}`);
    const body = `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":${args}}}]},{"role":"tool","tool_call_id":"call_1","content":"ok"}]}`;
    const r = await post('/v1/chat/completions', body);
    expect(r.status).toBe(400);
    expect(r.body.error?.message).toMatch(/messages\[1\]\.tool_calls\[0\]\.function\.arguments nests .* deeper than 256 levels/);
  });

  it('serves nesting within the bound, and keeps serving after the refusals', async () => {
    const args = JSON.stringify(`{"a":${nested(100)}}`);
    const body = `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":${JSON.stringify(QUESTION)}},{"role":"assistant","content":null,"tool_calls":[{"id":"call_2","type":"function","function":{"name":"f","arguments":${args}}}]},{"role":"tool","tool_call_id":"call_2","content":"ok"}]}`;
    const r = await post('/v1/chat/completions', body);
    expect(r.status).toBe(200);
  });
});
