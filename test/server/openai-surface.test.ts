// The OpenAI surface beyond plain chat, through the official client: response_format, logprobs,
// n, /v1/completions, /tokenize + /detokenize and the prompt overflow policy. Scripted models
// make every output exact (test/server/surface-fixtures.ts).
import type OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { anthropicFor, openaiFor } from './clients.js';
import {
  COLOR_QUESTION, JSON_QUESTION, STORY, STORY_PROMPT, WEATHER_JSON, WEATHER_SCHEMA, chatPrompt, ensureSurfaceModels, type SurfaceModels,
} from './surface-fixtures.js';
import { SCRIPTED_LOGITS, expectWithin, scriptedGreedyLogprobFloor, scriptedLogprobTolerance } from '../helpers/tolerance.js';

type Completion = OpenAI.Chat.Completions.ChatCompletion;

async function caught(p: Promise<unknown>): Promise<Error & { status?: number; error?: { message?: string; type?: string; code?: string | null } }> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e).toBeInstanceOf(Error);
  return e as Error & { status?: number; error?: { message?: string } };
}

const ask = (content: string) => [{ role: 'user' as const, content }];
/** Sampling at temperature 1 with nothing cut: the color tie is 55 % "Red", 45 % "Blue". */
const SAMPLED = { temperature: 1, top_p: 1, top_k: 0, min_p: 0 } as Record<string, number>;

let models: SurfaceModels;
beforeAll(async () => {
  models = await ensureSurfaceModels();
});

describe('structured output, logprobs and completions on the JSON model', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;

  beforeAll(async () => {
    model = await loadModel(models.json.path);
    server = await createServer({ model, port: 0, ctx: 2048, parallel: 4, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  it('response_format json_schema (strict) makes the answer exactly the JSON value: generation ends when it closes', async () => {
    const free = await openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), temperature: 0 });
    expect(free.choices[0]!.message.content).toBe(`${WEATHER_JSON} Done.`);
    expect(free.usage!.prompt_tokens).toBe(models.json.scripts.json!.promptTokens.length);
    const r = await openai.chat.completions.create({
      model: 'm',
      messages: ask(JSON_QUESTION),
      temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'weather', schema: WEATHER_SCHEMA, strict: true } },
    });
    expect(r.choices[0]!.message.content).toBe(WEATHER_JSON);
    expect(r.choices[0]!.finish_reason).toBe('stop');
    expect(r.usage!.completion_tokens).toBe(4);
    expect(JSON.parse(r.choices[0]!.message.content!)).toEqual({ city: 'Paris', temp: 18 });
  });

  it('the client\'s zodResponseFormat + chat.completions.parse: the parsed object', async () => {
    const Weather = z.object({ city: z.string(), temp: z.number().int() });
    const r = await openai.chat.completions.parse({ model: 'm', messages: ask(JSON_QUESTION), temperature: 0, response_format: zodResponseFormat(Weather, 'weather') });
    expect(r.choices[0]!.message.parsed).toEqual({ city: 'Paris', temp: 18 });
  });

  it('response_format json_object: any JSON object, streamed in exact deltas', async () => {
    const r = await openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), temperature: 0, response_format: { type: 'json_object' } });
    expect(r.choices[0]!.message.content).toBe(WEATHER_JSON);
    const stream = await openai.chat.completions.create({
      model: 'm',
      messages: ask(JSON_QUESTION),
      temperature: 0,
      stream: true,
      response_format: { type: 'json_schema', json_schema: { name: 'weather', schema: WEATHER_SCHEMA } },
    });
    let text = '';
    let finish: string | null = null;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(WEATHER_JSON);
    expect(finish).toBe('stop');
  });

  it('answers 400 in the client error shape for a schema no value satisfies, top_logprobs without logprobs, n out of range', async () => {
    const bad = { type: 'object', properties: { a: { type: 'string', enum: [1] } }, required: ['a'] };
    let e = await caught(openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), response_format: { type: 'json_schema', json_schema: { name: 'x', schema: bad } } }));
    expect(e.status).toBe(400);
    expect(e.error?.type).toBe('invalid_request_error');
    expect(e.message).toMatch(/response_format\.json_schema\.schema.*cannot be compiled/);
    e = await caught(openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), top_logprobs: 2 }));
    expect([e.status, e.message]).toEqual([400, expect.stringContaining('top_logprobs needs logprobs: true')]);
    for (const n of [0, 17]) {
      e = await caught(openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), n }));
      expect([e.status, e.message]).toEqual([400, expect.stringContaining('n')]);
    }
    e = await caught(openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), response_format: { type: 'json_schema', json_schema: { name: 'bad name!' } } }));
    expect(e.status).toBe(400);
  });

  it('logprobs: one entry per completion token; greedy picks are the top-1; the end token is the runner-up at logit 20 below', async () => {
    const r = await openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), temperature: 0, logprobs: true, top_logprobs: 2 });
    const content = r.choices[0]!.logprobs!.content!;
    expect(content).toHaveLength(r.usage!.completion_tokens);
    expect(content.map((c) => c.token).join('')).toBe(r.choices[0]!.message.content);
    // float32 forward pass and log-softmax on any CPU variant: the bounds of test/helpers/tolerance.ts
    const tolerance = scriptedLogprobTolerance(models.json);
    for (const c of content) {
      expect(c.logprob).toBeLessThanOrEqual(0);
      expect(c.logprob).toBeGreaterThanOrEqual(scriptedGreedyLogprobFloor(models.json));
      expect(c.top_logprobs).toHaveLength(2);
      expect(c.top_logprobs[0]).toEqual({ token: c.token, logprob: c.logprob, bytes: c.bytes });
      // The scripted successor has logit 40, the end of generation 20, the rest 0 (src/gguf/scripted.ts).
      expect(c.top_logprobs[1]!.token).toBe('<|im_end|>');
      expectWithin(c.top_logprobs[1]!.logprob, SCRIPTED_LOGITS.eos - SCRIPTED_LOGITS.script, tolerance);
      // the sum passes 1 by rounding only: the top one is ≤ 0 (logZ rounds to ≥ the largest
      // logit), the end token's within the tolerance of -20
      expect(c.top_logprobs.reduce((a, t) => a + Math.exp(t.logprob), 0)).toBeLessThanOrEqual(1 + Math.exp(SCRIPTED_LOGITS.eos - SCRIPTED_LOGITS.script + tolerance));
      expect(Buffer.from(c.bytes!).toString('utf8')).toBe(c.token);
    }
    const stream = await openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), temperature: 0, logprobs: true, top_logprobs: 2, stream: true });
    const streamed: typeof content = [];
    for await (const c of stream) streamed.push(...(c.choices[0]?.logprobs?.content ?? []));
    expect(streamed).toEqual(content);
    const none = await openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), temperature: 0 });
    expect(none.choices[0]!.logprobs).toBeNull();
  });

  it('n greedy choices are identical, from one prefill', async () => {
    const r = await openai.chat.completions.create({ model: 'm', messages: ask(JSON_QUESTION), temperature: 0, n: 3 });
    expect(r.choices.map((c) => [c.index, c.message.content])).toEqual([0, 1, 2].map((i) => [i, `${WEATHER_JSON} Done.`]));
    expect(r.usage!.completion_tokens).toBe(15);
    expect(r.usage!.prompt_tokens).toBe(models.json.scripts.json!.promptTokens.length);
  });

  it('/v1/completions: the text generate() writes for the raw prompt; logprobs, max_tokens, echo, n, stream', async () => {
    const lib = await server.context.complete({ prompt: STORY_PROMPT, temperature: 0 });
    expect(lib.text).toBe(STORY);
    const r = await openai.completions.create({ model: 'm', prompt: STORY_PROMPT, temperature: 0, logprobs: 1 });
    expect(r.object).toBe('text_completion');
    expect(r.choices[0]!.text).toBe(lib.text);
    expect(r.choices[0]!.finish_reason).toBe('stop');
    expect(r.usage).toMatchObject({ prompt_tokens: lib.promptTokens, completion_tokens: 4 });
    const lp = r.choices[0]!.logprobs!;
    expect(lp.tokens!.join('')).toBe(STORY);
    expect(lp.token_logprobs).toHaveLength(4);
    expect(lp.top_logprobs!.map((t, i) => Object.keys(t))).toEqual(lp.tokens!.map((t) => [t]));
    expect(lp.text_offset).toEqual([0, 6, 10, 12]);
    const short = await openai.completions.create({ model: 'm', prompt: STORY_PROMPT, temperature: 0, max_tokens: 2, echo: true });
    expect([short.choices[0]!.text, short.choices[0]!.finish_reason]).toEqual([`${STORY_PROMPT} there was`, 'length']);
    const two = await openai.completions.create({ model: 'm', prompt: STORY_PROMPT, temperature: 0, n: 2 });
    expect(two.choices.map((c) => [c.index, c.text])).toEqual([[0, STORY], [1, STORY]]);
    const stream = await openai.completions.create({ model: 'm', prompt: STORY_PROMPT, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage: OpenAI.Completions.CompletionUsage | undefined;
    for await (const c of stream) {
      text += c.choices[0]?.text ?? '';
      usage = c.usage ?? usage;
    }
    expect(text).toBe(STORY);
    expect(usage?.completion_tokens).toBe(4);
    const twoStreamed = await openai.completions.create({ model: 'm', prompt: STORY_PROMPT, temperature: 0, n: 2, stream: true });
    const byIndex = ['', ''];
    for await (const c of twoStreamed) for (const ch of c.choices) byIndex[ch.index] += ch.text;
    expect(byIndex).toEqual([STORY, STORY]);
    const ids = await openai.completions.create({ model: 'm', prompt: Array.from(model.tokenize(STORY_PROMPT)), temperature: 0 });
    expect(ids.choices[0]!.text).toBe(STORY);
  });

  it('/v1/completions answers 400 for suffix on a model without FIM tokens, several prompts and tokens outside the vocabulary', async () => {
    for (const body of [
      { prompt: STORY_PROMPT, suffix: 'end' },
      { prompt: ['a', 'b'] },
      { prompt: [1, 2, models.json.nVocab + 5] },
      { prompt: STORY_PROMPT, echo: true, logprobs: 1 },
    ]) {
      const e = await caught(openai.completions.create({ model: 'm', ...body } as OpenAI.Completions.CompletionCreateParamsNonStreaming));
      expect(e.status).toBe(400);
      expect(e.error?.type).toBe('invalid_request_error');
    }
  });

  it('/tokenize and /detokenize round-trip through the model vocabulary', async () => {
    const post = async (path: string, body: unknown) => {
      const res = await fetch(`${server.url}${path}`, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const text = `${STORY_PROMPT}${STORY}`;
    const plain = await post('/tokenize', { content: text });
    expect(plain.body.tokens).toEqual(Array.from(model.tokenize(text, { addSpecial: false })));
    const withBos = await post('/tokenize', { content: text, add_special: true });
    expect(withBos.body.tokens).toEqual(Array.from(model.tokenize(text)));
    const special = await post('/tokenize', { content: '<|im_end|>', parse_special: true, with_pieces: true });
    expect(special.body.tokens).toEqual([{ id: models.json.special['<|im_end|>']!.id, piece: '<|im_end|>' }]);
    const back = await post('/detokenize', { tokens: plain.body.tokens });
    expect(back.body.content).toBe(model.detokenize(model.tokenize(text, { addSpecial: false }), { special: true }));
    expect((back.body.content as string).trim()).toBe(text);
    const bad = await post('/detokenize', { tokens: [models.json.nVocab] });
    expect(bad.status).toBe(400);
    expect((bad.body.error as { type: string }).type).toBe('invalid_request_error');
  });
});

describe('n choices under seeded sampling', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;

  beforeAll(async () => {
    model = await loadModel(models.color.path);
    server = await createServer({ model, port: 0, ctx: 2048, parallel: 4, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  const create = (extra: Record<string, unknown>) =>
    openai.chat.completions.create({ model: 'm', messages: ask(COLOR_QUESTION), ...SAMPLED, ...extra } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming) as Promise<Completion>;

  it('choice i is what one request with seed + i writes: they differ, and each is reproducible', async () => {
    const r = await create({ n: 8, seed: 0 });
    const texts = r.choices.map((c) => c.message.content);
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    for (const t of texts) expect(['Red.', 'Blue.']).toContain(t);
    expect(new Set(texts).size).toBe(2);
    expect(r.usage!.completion_tokens).toBe(16);
    const singles = [];
    for (let i = 0; i < 8; i++) singles.push((await create({ seed: i })).choices[0]!.message.content);
    expect(singles).toEqual(texts);
    expect((await create({ n: 8, seed: 0 })).choices.map((c) => c.message.content)).toEqual(texts);
  });

  it('logprobs of a sampled near tie: ln 0.55 and ln 0.45 (the scripted gap), whichever was picked', async () => {
    const r = await create({ n: 4, seed: 0, logprobs: true, top_logprobs: 2 });
    const tolerance = scriptedLogprobTolerance(models.color); // float32 on any CPU variant (test/helpers/tolerance.ts)
    for (const c of r.choices) {
      const first = c.logprobs!.content![0]!;
      expect(first.token).toBe(c.message.content!.slice(0, -1));
      expect(first.top_logprobs.map((t) => t.token)).toEqual(['Red', 'Blue']);
      expectWithin(first.top_logprobs[0]!.logprob, Math.log(0.55), tolerance);
      expectWithin(first.top_logprobs[1]!.logprob, Math.log(0.45), tolerance);
      expect(first.logprob).toBe(first.top_logprobs[first.token === 'Red' ? 0 : 1]!.logprob);
    }
  });

  it('streams n choices side by side, each equal to the non-streamed one', async () => {
    const whole = await create({ n: 3, seed: 5 });
    const stream = await openai.chat.completions.create({ model: 'm', messages: ask(COLOR_QUESTION), ...SAMPLED, n: 3, seed: 5, stream: true, stream_options: { include_usage: true } } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
    const texts = ['', '', ''];
    const finishes: (string | null)[] = [null, null, null];
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const c of stream) {
      for (const ch of c.choices) {
        texts[ch.index] += ch.delta.content ?? '';
        finishes[ch.index] = ch.finish_reason ?? finishes[ch.index]!;
      }
      usage = c.usage ?? usage;
    }
    expect(texts).toEqual(whole.choices.map((c) => c.message.content));
    expect(finishes).toEqual(['stop', 'stop', 'stop']);
    expect(usage?.completion_tokens).toBe(6);
  });
});

describe('--overflow: prompts longer than a sequence', () => {
  const long = `${'Weather as JSON '.repeat(200)}${JSON_QUESTION}`;
  let model: Model;
  let strict: LlamuxServer;
  let cutting: LlamuxServer;

  beforeAll(async () => {
    model = await loadModel(models.json.path);
    strict = await createServer({ model, port: 0, ctx: 128, parallel: 1, threads: 1 });
    cutting = await createServer({ model, port: 0, ctx: 128, parallel: 1, threads: 1, overflow: 'truncate-middle' });
  });
  afterAll(async () => {
    await strict.close();
    await cutting.close();
    await model.dispose();
  });

  it('error (the default): 400 context_length_exceeded naming the way out, for chat and completions', async () => {
    const openai = openaiFor(strict);
    let e = await caught(openai.chat.completions.create({ model: 'm', messages: ask(long), temperature: 0 }));
    expect([e.status, e.error?.code]).toEqual([400, 'context_length_exceeded']);
    expect(e.message).toContain('--overflow truncate-middle');
    e = await caught(openai.completions.create({ model: 'm', prompt: long, temperature: 0 }));
    expect([e.status, e.error?.code]).toEqual([400, 'context_length_exceeded']);
  });

  it('truncate-middle keeps the start and the end, leaves max_tokens of room and reports what it dropped', async () => {
    const openai = openaiFor(cutting);
    const seq = cutting.context.settings.sequenceContextSize;
    const full = model.tokenize(chatPrompt(long), { parseSpecial: true }).length;
    expect(full).toBeGreaterThan(seq);
    const { data, response } = await openai.chat.completions.create({ model: 'm', messages: ask(long), temperature: 0, max_tokens: 16 }).withResponse();
    const usage = data.usage as OpenAI.CompletionUsage & { truncated_tokens?: number };
    expect(usage.prompt_tokens).toBe(seq - 16);
    expect(usage.truncated_tokens).toBe(full - (seq - 16));
    expect(response.headers.get('x-llamux-truncated-tokens')).toBe(String(full - (seq - 16)));
    // The end of the prompt survived: the model answers the question it ends with.
    expect(data.choices[0]!.message.content).toBe(`${WEATHER_JSON} Done.`);
    const c = await openai.completions.create({ model: 'm', prompt: `${long} ${STORY_PROMPT}`, temperature: 0 });
    expect(c.choices[0]!.text).toBe(STORY);
    expect((c.usage as { truncated_tokens?: number }).truncated_tokens).toBeGreaterThan(0);
    expect(c.usage!.prompt_tokens).toBe(seq - Math.floor(seq / 4));
  });

  it('truncate-middle on /v1/messages: the header reports the cut; count_tokens counts the whole prompt', async () => {
    const anthropic = anthropicFor(cutting);
    const seq = cutting.context.settings.sequenceContextSize;
    const full = model.tokenize(chatPrompt(long), { parseSpecial: true }).length;
    const { data, response } = await anthropic.messages.create({ model: 'm', max_tokens: 16, messages: ask(long) }).withResponse();
    expect(response.headers.get('x-llamux-truncated-tokens')).toBe(String(full - (seq - 16)));
    expect(data.content).toEqual([expect.objectContaining({ type: 'text', text: `${WEATHER_JSON} Done.` })]);
    expect((await anthropic.messages.countTokens({ model: 'm', messages: ask(long) })).input_tokens).toBe(full);
  });
});
