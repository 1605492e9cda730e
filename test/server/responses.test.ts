// The Responses API through the official openai client, on the scripted `demo` model (ChatML
// template, a get_weather call, then a text answer): create, stream, retrieve, delete,
// input_items, previous_response_id chains that prefill only the new items, store: false.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate } from '../../src/chat/index.js';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { script } from '../helpers/models.js';
import { tinyModelPath } from '../helpers/paths.js';
import { openaiFor } from './clients.js';
import { ANSWER, QUESTION, WEATHER_RESULT, ensureChatModels } from './fixtures.js';
import { RESPONSE_TOOLS } from './responses-fixtures.js';

type Response = OpenAI.Responses.Response;

function callOf(r: Response): OpenAI.Responses.ResponseFunctionToolCall {
  const c = r.output.find((o) => o.type === 'function_call');
  if (c?.type !== 'function_call') throw new Error(`expected a function_call, got ${JSON.stringify(r.output)}`);
  return c;
}

describe('/v1/responses with the official openai client', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  /** Turn 1's prompt and output lengths, from the tokenizer and the script (not from the server). */
  let turn1Prompt: number;
  let turn1Output: number;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1 });
    openai = openaiFor(server);
    const text = ChatTemplate.fromModel(model).render([{ role: 'user', content: QUESTION }], { tools: RESPONSE_TOOLS.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters })) });
    turn1Prompt = model.tokenize(text, { addSpecial: true, parseSpecial: true }).length;
    turn1Output = script('demo', 'turn1').greedy.length;
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  const turn1 = (extra: Partial<OpenAI.Responses.ResponseCreateParamsNonStreaming> = {}) =>
    openai.responses.create({ model: 'demo', input: QUESTION, tools: RESPONSE_TOOLS, temperature: 0, ...extra });

  it('create with a string: a function_call item, usage, and the echoed request fields', async () => {
    const r = await turn1({ metadata: { run: 'a' } });
    expect(r.object).toBe('response');
    expect(r.id).toMatch(/^resp_[0-9a-f]{48}$/);
    expect(r.status).toBe('completed');
    expect(r.model).toBe('demo');
    expect(r.metadata).toEqual({ run: 'a' });
    expect(r.output).toHaveLength(1);
    const call = callOf(r);
    expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', status: 'completed' });
    expect(JSON.parse(call.arguments)).toEqual({ city: 'Paris' });
    expect(call.call_id).toMatch(/^call_/);
    expect(call.id).toMatch(/^fc_/);
    expect(r.usage).toMatchObject({ input_tokens: turn1Prompt, output_tokens: turn1Output, total_tokens: turn1Prompt + turn1Output, output_tokens_details: { reasoning_tokens: 0 } });
    expect(r.tools).toEqual([{ ...RESPONSE_TOOLS[0], strict: false }]);
  });

  it('create with items: a user message item; instructions become the system prompt', async () => {
    const plain = await openai.responses.create({ model: 'demo', input: [{ role: 'user', content: [{ type: 'input_text', text: QUESTION }] }], tools: RESPONSE_TOOLS });
    expect(plain.usage!.input_tokens).toBe(turn1Prompt);
    expect(JSON.parse(callOf(plain).arguments)).toEqual({ city: 'Paris' });
    const withInstructions = await turn1({ instructions: 'Be brief.' });
    expect(withInstructions.instructions).toBe('Be brief.');
    expect(withInstructions.usage!.input_tokens).toBeGreaterThan(turn1Prompt);
  });

  // The first turn 2 on this server: nothing but turn 1's Session can hold its tokens.
  it('previous_response_id with a function_call_output: the answer, prefilling only the new items', async () => {
    const r1 = await turn1();
    const call = callOf(r1);
    const r2 = await openai.responses.create({
      model: 'demo',
      previous_response_id: r1.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: WEATHER_RESULT }],
      tools: RESPONSE_TOOLS,
      temperature: 0,
    });
    expect(r2.output_text).toBe(ANSWER);
    expect(r2.previous_response_id).toBe(r1.id);
    // the whole of turn 1 (its prompt and the call it generated, replayed as its exact tokens) is reused
    expect(r2.usage!.input_tokens_details.cached_tokens).toBe(turn1Prompt + turn1Output);
    expect(r2.usage!.output_tokens).toBe(script('demo', 'turn2').greedy.length);
    // turn 3: a new user message after the text answer; everything before it is reused
    const r3 = await openai.responses.create({ model: 'demo', previous_response_id: r2.id, input: 'And tomorrow?', tools: RESPONSE_TOOLS, temperature: 0, max_output_tokens: 3 });
    expect(r3.usage!.input_tokens_details.cached_tokens).toBe(r2.usage!.input_tokens + r2.usage!.output_tokens);
    expect(r3.status).toBe('incomplete');
    expect(r3.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(r3.usage!.output_tokens).toBe(3);
  });

  it('the same conversation resent in full (no previous_response_id) continues the same Session', async () => {
    const r1 = await turn1();
    const call = callOf(r1);
    const r2 = await openai.responses.create({
      model: 'demo',
      input: [
        { role: 'user', content: QUESTION },
        { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
        { type: 'function_call_output', call_id: call.call_id, output: WEATHER_RESULT },
      ],
      tools: RESPONSE_TOOLS,
      temperature: 0,
    });
    expect(r2.output_text).toBe(ANSWER);
    // (at least: an earlier test's turn 2 left more of this text in the server's prefix cache)
    expect(r2.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(turn1Prompt + turn1Output);
  });

  it('an item_reference to an item of the previous responses is that item, once (as clients that resend references do)', async () => {
    const r1 = await turn1();
    const call = callOf(r1);
    const r2 = await openai.responses.create({
      model: 'demo',
      previous_response_id: r1.id,
      input: [{ type: 'item_reference', id: call.id! }, { type: 'function_call_output', call_id: call.call_id, output: WEATHER_RESULT }],
      tools: RESPONSE_TOOLS,
      temperature: 0,
    });
    expect(r2.output_text).toBe(ANSWER);
    const items = await openai.responses.inputItems.list(r2.id, { order: 'asc' });
    expect(items.data.map((i) => i.type)).toEqual(['message', 'function_call', 'function_call_output']);
    await expect(openai.responses.create({ model: 'demo', previous_response_id: r1.id, input: [{ type: 'item_reference', id: 'fc_elsewhere' }] })).rejects.toMatchObject({
      status: 400,
      error: { param: 'input[0].id' },
    });
  });

  it('responses.stream: the events in order, numbered, and the final response as stored', async () => {
    const r1 = await turn1();
    const stream = openai.responses.stream({
      model: 'demo',
      previous_response_id: r1.id,
      input: [{ type: 'function_call_output', call_id: callOf(r1).call_id, output: WEATHER_RESULT }],
      tools: RESPONSE_TOOLS,
      temperature: 0,
    });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    const deltas: string[] = [];
    stream.on('response.output_text.delta', (e) => deltas.push(e.delta));
    for await (const e of stream) events.push(e);
    const final = await stream.finalResponse();
    const types = events.map((e) => e.type);
    const n = deltas.length;
    expect(n).toBeGreaterThan(1);
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array<string>(n).fill('response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(deltas.join('')).toBe(ANSWER);
    const done = events.find((e) => e.type === 'response.output_text.done');
    expect(done?.type === 'response.output_text.done' && done.text).toBe(ANSWER);
    expect(final.status).toBe('completed');
    expect(final.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(turn1Prompt + turn1Output);
    const stored = await openai.responses.retrieve(final.id);
    expect(stored.output).toEqual(JSON.parse(JSON.stringify(final.output, (k, v: unknown) => (k === 'parsed' || k === 'parsed_arguments' ? undefined : v))));
  });

  it('streams a function call: item added, arguments delta and done, item done', async () => {
    const stream = await openai.responses.create({ model: 'demo', input: QUESTION, tools: RESPONSE_TOOLS, temperature: 0, stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const args = events.find((e) => e.type === 'response.function_call_arguments.done');
    expect(args?.type === 'response.function_call_arguments.done' && JSON.parse(args.arguments)).toEqual({ city: 'Paris' });
    const completed = events.at(-1)!;
    expect(completed.type === 'response.completed' && completed.response.usage!.output_tokens).toBe(turn1Output);
  });

  it('retrieve, input_items (paged, both orders) and delete', async () => {
    const r1 = await turn1();
    const call = callOf(r1);
    const r2 = await openai.responses.create({ model: 'demo', previous_response_id: r1.id, input: [{ type: 'function_call_output', call_id: call.call_id, output: WEATHER_RESULT }], tools: RESPONSE_TOOLS });
    const got = await openai.responses.retrieve(r2.id);
    expect(got.id).toBe(r2.id);
    expect(got.output_text).toBe(ANSWER);
    expect(got.usage).toEqual(r2.usage);
    const all: OpenAI.Responses.ResponseItem[] = [];
    for await (const item of openai.responses.inputItems.list(r2.id, { order: 'asc', limit: 2 })) all.push(item);
    expect(all.map((i) => i.type)).toEqual(['message', 'function_call', 'function_call_output']);
    expect(all[0]).toMatchObject({ role: 'user', content: [{ type: 'input_text', text: QUESTION }] });
    expect(all[1]).toMatchObject({ id: call.id, call_id: call.call_id, name: 'get_weather' });
    expect(all[2]).toMatchObject({ call_id: call.call_id, output: WEATHER_RESULT });
    const desc = await openai.responses.inputItems.list(r2.id);
    expect(desc.data.map((i) => i.id)).toEqual(all.map((i) => i.id).reverse());
    expect(desc.has_more).toBe(false);

    await openai.responses.delete(r2.id);
    await expect(openai.responses.retrieve(r2.id)).rejects.toMatchObject({ status: 404 });
    await expect(openai.responses.inputItems.list(r2.id)).rejects.toMatchObject({ status: 404 });
    await expect(openai.responses.delete(r2.id)).rejects.toMatchObject({ status: 404 });
    // a deleted response cannot be continued
    await expect(openai.responses.create({ model: 'demo', previous_response_id: r2.id, input: 'more' })).rejects.toMatchObject({ status: 404, error: { type: 'invalid_request_error', param: 'previous_response_id' } });
    // its ancestor is still there
    expect((await openai.responses.retrieve(r1.id)).id).toBe(r1.id);
  });

  it('store: false answers but keeps nothing: the id can be neither retrieved nor continued', async () => {
    const r = await turn1({ store: false });
    expect((r as unknown as { store: boolean }).store).toBe(false);
    expect(JSON.parse(callOf(r).arguments)).toEqual({ city: 'Paris' });
    await expect(openai.responses.retrieve(r.id)).rejects.toMatchObject({ status: 404 });
    await expect(openai.responses.create({ model: 'demo', previous_response_id: r.id, input: 'more' })).rejects.toMatchObject({ status: 404 });
  });

  it('accepts the no-op fields current clients send', async () => {
    const r = await turn1({
      reasoning: { effort: 'low', summary: 'auto' },
      text: { format: { type: 'text' }, verbosity: 'low' },
      parallel_tool_calls: false,
      tool_choice: 'auto',
      truncation: 'disabled',
      include: ['reasoning.encrypted_content'],
      prompt_cache_key: 'session-1',
      safety_identifier: 'u1',
      service_tier: 'auto',
      user: 'someone',
      top_p: 1,
      max_output_tokens: 64,
    });
    expect(r.status).toBe('completed');
    expect(r.reasoning).toEqual({ effort: 'low', summary: 'auto' });
    expect(JSON.parse(callOf(r).arguments)).toEqual({ city: 'Paris' });
  });

  it('tool_choice "none" answers without calls; a named function that is not declared is a 400', async () => {
    const r = await turn1({ tool_choice: 'none', max_output_tokens: 4 });
    expect(r.output.every((o) => o.type === 'message')).toBe(true);
    await expect(turn1({ tool_choice: { type: 'function', name: 'nope' } })).rejects.toMatchObject({ status: 400, error: { param: 'tool_choice' } });
  });

  describe('bad input: 404 and 400 in the OpenAI error shape', () => {
    async function rawPost(body: unknown): Promise<{ status: number; json: { error: { message: string; type: string; param: string | null; code: string | null } } }> {
      const text = typeof body === 'string' ? body : JSON.stringify(body);
      const res = await fetch(`${server.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text });
      return { status: res.status, json: (await res.json()) as never };
    }

    it('an unknown previous_response_id, streamed or not', async () => {
      for (const stream of [false, true]) {
        const r = await rawPost({ model: 'demo', previous_response_id: 'resp_unknown', input: 'hi', stream });
        expect(r.status).toBe(404);
        expect(r.json.error).toMatchObject({ type: 'invalid_request_error', param: 'previous_response_id', code: 'not_found' });
        expect(r.json.error.message).toMatch(/No response with id "resp_unknown"/);
      }
    });

    it('items of unknown types and non-text parts', async () => {
      let r = await rawPost({ model: 'demo', input: [{ type: 'web_search_call', id: 'ws_1' }] });
      expect(r.status).toBe(400);
      expect(r.json.error.message).toMatch(/input\[0\]: items of type "web_search_call" are not supported/);
      r = await rawPost({ model: 'demo', input: [{ type: 'item_reference', id: 'msg_1' }] });
      expect(r.status).toBe(400);
      expect(r.json.error.message).toMatch(/item_reference "msg_1" names no item/);
      r = await rawPost({ model: 'demo', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] });
      expect(r.status).toBe(400);
      expect(r.json.error.message).toMatch(/content parts of type "input_image"/);
      r = await rawPost({ model: 'demo', input: 'hi', tools: [{ type: 'web_search' }] });
      expect(r.status).toBe(400);
      expect(r.json.error.message).toMatch(/tools\[0\]: tools of type "web_search"/);
    });

    it('a function_call_output for no call, alone or after a previous response', async () => {
      let r = await rawPost({ model: 'demo', input: [{ role: 'user', content: QUESTION }, { type: 'function_call_output', call_id: 'call_nowhere', output: '1' }] });
      expect(r.status).toBe(400);
      expect(r.json.error).toMatchObject({ param: 'input[1].call_id' });
      expect(r.json.error.message).toMatch(/call_nowhere.*matches no function_call/);
      const r1 = await turn1();
      r = await rawPost({ model: 'demo', previous_response_id: r1.id, input: [{ type: 'function_call_output', call_id: 'call_other', output: '1' }] });
      expect(r.status).toBe(400);
    });

    it('empty input, unknown fields, background, JSON nested too deep', async () => {
      expect((await rawPost({ model: 'demo', input: [] })).status).toBe(400);
      expect((await rawPost({ model: 'demo', input: 'hi', frobnicate: 1 })).status).toBe(400);
      const bg = await rawPost({ model: 'demo', input: 'hi', background: true });
      expect(bg.status).toBe(400);
      expect(bg.json.error.message).toMatch(/background/);
      const deepArgs = `${'['.repeat(300)}${']'.repeat(300)}`;
      const deep = await rawPost({ model: 'demo', input: [{ role: 'user', content: QUESTION }, { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: deepArgs }] });
      expect(deep.status).toBe(400);
      expect(deep.json.error.message).toMatch(/nests arrays and objects deeper than 256/);
      expect((await rawPost(`{"model": "demo", "input": ${'['.repeat(5000)}${']'.repeat(5000)}}`)).status).toBe(400);
      // the server is still healthy
      expect(JSON.parse(callOf(await turn1()).arguments)).toEqual({ city: 'Paris' });
    });

    it('methods and paths', async () => {
      expect((await fetch(`${server.url}/v1/responses`)).status).toBe(405);
      expect((await fetch(`${server.url}/v1/responses/resp_x`, { method: 'POST' })).status).toBe(405);
      expect((await fetch(`${server.url}/v1/responses/resp_x/other`)).status).toBe(404);
      expect((await fetch(`${server.url}/v1/responses/%E0%A4%A`)).status).toBe(400);
    });
  });
});

describe('/v1/responses across tenants and with an expiring store', () => {
  let model: Model;
  let server: LlamuxServer;
  const client = (tenant: string) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 30_000, defaultHeaders: { 'x-llamux-tenant': tenant } });

  beforeAll(async () => {
    model = await loadModel((await ensureChatModels()).demo);
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1, isolateTenants: true, responseStoreLimits: { maxAgeMs: 1500 } });
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  it("another tenant's response id is a 404 for retrieve, input_items, delete and previous_response_id", async () => {
    const a = client('alice');
    const b = client('bob');
    const r = await a.responses.create({ model: 'demo', input: QUESTION, tools: RESPONSE_TOOLS });
    await expect(b.responses.retrieve(r.id)).rejects.toMatchObject({ status: 404 });
    await expect(b.responses.inputItems.list(r.id)).rejects.toMatchObject({ status: 404 });
    await expect(b.responses.delete(r.id)).rejects.toMatchObject({ status: 404 });
    await expect(b.responses.create({ model: 'demo', previous_response_id: r.id, input: [{ type: 'function_call_output', call_id: callOf(r).call_id, output: WEATHER_RESULT }] })).rejects.toMatchObject({ status: 404 });
    // still alice's
    expect((await a.responses.retrieve(r.id)).id).toBe(r.id);
    const r2 = await a.responses.create({ model: 'demo', previous_response_id: r.id, input: [{ type: 'function_call_output', call_id: callOf(r).call_id, output: WEATHER_RESULT }], tools: RESPONSE_TOOLS });
    expect(r2.output_text).toBe(ANSWER);
    expect(r2.usage!.input_tokens_details.cached_tokens).toBe(r.usage!.input_tokens + r.usage!.output_tokens);
  });

  it('an expired response is a 404', async () => {
    const a = client('carol');
    const r = await a.responses.create({ model: 'demo', input: QUESTION, tools: RESPONSE_TOOLS });
    expect((await a.responses.retrieve(r.id)).id).toBe(r.id);
    await new Promise((resolve) => setTimeout(resolve, 1600));
    await expect(a.responses.retrieve(r.id)).rejects.toMatchObject({ status: 404 });
    await expect(a.responses.create({ model: 'demo', previous_response_id: r.id, input: 'more' })).rejects.toMatchObject({ status: 404 });
  });
});

describe('/v1/responses when the server shuts down (tiny Llama 2 model)', () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('an open stream ends with response.failed and an error event, a waiting request gets 503', async () => {
    const server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1 });
    const openai = openaiFor(server);
    // End of generation banned: a long answer that is still running when the server closes.
    const long = { model: 'm', input: 'Once upon a time', max_output_tokens: 3500, temperature: 0, logit_bias: { '2': -100 } } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming;
    const stream = openai.responses.stream(long as Parameters<typeof openai.responses.stream>[0]);
    const final = stream.finalResponse().then(
      () => undefined,
      (err: unknown) => err,
    );
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    let closed: Promise<void> | undefined;
    let waiting: Promise<unknown> | undefined;
    for await (const e of stream) {
      events.push(e);
      if (e.type === 'response.output_text.delta' && !closed) {
        waiting = openai.responses.create(long).then(
          () => undefined,
          (err: unknown) => err,
        );
        await new Promise((r) => setTimeout(r, 100));
        closed = server.close();
      }
    }
    await closed;
    const types = events.map((e) => e.type);
    expect(types.slice(-2)).toEqual(['response.failed', 'error']);
    expect(types).not.toContain('response.completed');
    const [failed, error] = events.slice(-2);
    expect(failed?.type === 'response.failed' && failed.response).toMatchObject({ status: 'failed', error: { code: 'overloaded', message: 'The server is shutting down' } });
    expect(error).toMatchObject({ type: 'error', code: 'overloaded', message: 'The server is shutting down' });
    // the client's helper does not take the cut stream for a complete response: it rejects (with the event)
    expect(await final).toMatchObject({ type: 'error', message: 'The server is shutting down' });
    expect(await waiting).toMatchObject({ status: 503 });
  });
});
