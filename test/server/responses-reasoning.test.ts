// The Responses API on a reasoning model (the Qwen3.5 template): reasoning items, streamed
// reasoning_text events, reasoning_tokens, and previous_response_id chains through a reasoning
// turn whose exact tokens are reused. Also text.format on the JSON model.
import type OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { WEATHER_QUESTION } from '../formats/fixtures.js';
import { openaiFor } from './clients.js';
import { ANSWER_2, THINK_1, THINK_2, TOOL_OUTPUT, XML_RESPONSE_TOOLS, ensureResponsesModel } from './responses-fixtures.js';
import { JSON_QUESTION, WEATHER_JSON, WEATHER_SCHEMA, ensureSurfaceModels } from './surface-fixtures.js';

type Response = OpenAI.Responses.Response;

function callOf(r: Response): OpenAI.Responses.ResponseFunctionToolCall {
  const c = r.output.find((o) => o.type === 'function_call');
  if (c?.type !== 'function_call') throw new Error(`expected a function_call, got ${JSON.stringify(r.output)}`);
  return c;
}

function reasoningOf(r: Response): string {
  const item = r.output.find((o) => o.type === 'reasoning');
  if (item?.type !== 'reasoning') throw new Error(`expected a reasoning item, got ${JSON.stringify(r.output)}`);
  return (item.content ?? []).map((c) => c.text).join('');
}

describe('/v1/responses on a reasoning model', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  let generated: { call: number; answer: number };
  const ask = { model: 'qwen', tools: XML_RESPONSE_TOOLS, temperature: 0, max_output_tokens: 64 };

  beforeAll(async () => {
    const built = await ensureResponsesModel();
    generated = built.generated;
    model = await loadModel(built.path);
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  /** The tokens of a reasoning span as generated: its text and the end marker. */
  const reasoningTokens = (text: string) => model.tokenize(`${text}</think>`, { addSpecial: false, parseSpecial: true }).length;

  // The first turn 2 on this server: only turn 1's Session can hold its tokens.
  it('a chain through reasoning and a call: turn 2 reuses every token of turn 1, its reasoning and call included', async () => {
    const r1 = await openai.responses.create({ ...ask, input: WEATHER_QUESTION });
    expect(r1.output.map((o) => o.type)).toEqual(['reasoning', 'function_call']);
    expect(reasoningOf(r1)).toBe(THINK_1);
    expect(JSON.parse(callOf(r1).arguments)).toEqual({ city: 'Paris', days: 3 });
    expect(r1.usage!.output_tokens).toBe(generated.call);
    expect(r1.usage!.output_tokens_details.reasoning_tokens).toBe(reasoningTokens(THINK_1));

    const r2 = await openai.responses.create({ ...ask, previous_response_id: r1.id, input: [{ type: 'function_call_output', call_id: callOf(r1).call_id, output: TOOL_OUTPUT }] });
    expect(r2.output.map((o) => o.type)).toEqual(['reasoning', 'message']);
    expect(reasoningOf(r2)).toBe(THINK_2);
    expect(r2.output_text).toBe(ANSWER_2);
    expect(r2.usage!.output_tokens).toBe(generated.answer);
    expect(r2.usage!.output_tokens_details.reasoning_tokens).toBe(reasoningTokens(THINK_2));
    expect(r2.usage!.input_tokens_details.cached_tokens).toBe(r1.usage!.input_tokens + r1.usage!.output_tokens);

    // Turn 3, a new user message: this template drops the reasoning of turns before the last
    // user message, so the prompt departs from the KV where turn 1's reasoning began (after its
    // `<think>\n`): turn 1's prompt is still reused.
    const r3 = await openai.responses.create({ ...ask, previous_response_id: r2.id, input: 'Thanks!', max_output_tokens: 2 });
    expect(r3.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(r1.usage!.input_tokens - 2);
    expect(r3.usage!.input_tokens_details.cached_tokens).toBeLessThan(r1.usage!.input_tokens + r1.usage!.output_tokens);
  });

  it('the reasoning item sent back in a full history (no previous_response_id) is replayed too', async () => {
    const r1 = await openai.responses.create({ ...ask, input: WEATHER_QUESTION });
    const r2 = await openai.responses.create({
      ...ask,
      input: [{ role: 'user', content: WEATHER_QUESTION }, ...(r1.output as OpenAI.Responses.ResponseInputItem[]), { type: 'function_call_output', call_id: callOf(r1).call_id, output: TOOL_OUTPUT }],
    });
    expect(r2.output_text).toBe(ANSWER_2);
    expect(r2.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(r1.usage!.input_tokens + r1.usage!.output_tokens);
  });

  it('streams reasoning_text events before the call, numbered in order', async () => {
    const stream = openai.responses.stream({ ...ask, input: WEATHER_QUESTION });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    const final = await stream.finalResponse();
    const types = events.map((e) => e.type);
    const n = types.filter((t) => t === 'response.reasoning_text.delta').length;
    expect(n).toBeGreaterThan(0);
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array<string>(n).fill('response.reasoning_text.delta'),
      'response.reasoning_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const done = events.find((e) => e.type === 'response.reasoning_text.done');
    expect(done?.type === 'response.reasoning_text.done' && done.text).toBe(THINK_1);
    expect(reasoningOf(final)).toBe(THINK_1);
    expect(final.output.map((o) => o.type)).toEqual(['reasoning', 'function_call']);
  });

  it('reasoning.effort "none" turns thinking off in the template: no reasoning item', async () => {
    const on = await openai.responses.create({ ...ask, input: WEATHER_QUESTION, max_output_tokens: 2 });
    const off = await openai.responses.create({ ...ask, input: WEATHER_QUESTION, max_output_tokens: 2, reasoning: { effort: 'none' } });
    expect(off.output.some((o) => o.type === 'reasoning')).toBe(false);
    expect(off.usage!.output_tokens_details.reasoning_tokens).toBe(0);
    // the template closes the empty reasoning span in the prompt
    expect(off.usage!.input_tokens).toBeGreaterThan(on.usage!.input_tokens);
  });
});

describe('/v1/responses text.format on the JSON model', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;

  beforeAll(async () => {
    model = await loadModel((await ensureSurfaceModels()).json.path);
    server = await createServer({ model, port: 0, ctx: 2048, parallel: 2, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  it('json_schema and json_object make the answer exactly the JSON value; text leaves it free', async () => {
    const free = await openai.responses.create({ model: 'm', input: JSON_QUESTION, temperature: 0, text: { format: { type: 'text' } } });
    expect(free.output_text).toBe(`${WEATHER_JSON} Done.`);
    const schema = await openai.responses.create({ model: 'm', input: JSON_QUESTION, temperature: 0, text: { format: { type: 'json_schema', name: 'weather', schema: WEATHER_SCHEMA, strict: true } } });
    expect(schema.output_text).toBe(WEATHER_JSON);
    expect(schema.text!.format).toMatchObject({ type: 'json_schema', name: 'weather' });
    const object = await openai.responses.create({ model: 'm', input: JSON_QUESTION, temperature: 0, text: { format: { type: 'json_object' } } });
    expect(object.output_text).toBe(WEATHER_JSON);
  });

  it("the client's zodTextFormat + responses.parse: the parsed object", async () => {
    const Weather = z.object({ city: z.string(), temp: z.number().int() });
    const r = await openai.responses.parse({ model: 'm', input: JSON_QUESTION, temperature: 0, text: { format: zodTextFormat(Weather, 'weather') } });
    expect(r.output_parsed).toEqual({ city: 'Paris', temp: 18 });
  });

  it('a schema no value satisfies is a 400', async () => {
    const bad = { type: 'object', properties: { a: { type: 'string', enum: [1] } }, required: ['a'] };
    await expect(openai.responses.create({ model: 'm', input: JSON_QUESTION, text: { format: { type: 'json_schema', name: 'x', schema: bad } } })).rejects.toMatchObject({ status: 400 });
  });
});
