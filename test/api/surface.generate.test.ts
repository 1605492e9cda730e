// Issue 29, library half: generate({ responseFormat }), generate({ logprobs }) and
// ctx.generateChoices({ n }) on scripted models whose outputs and logits are known exactly
// (src/gguf/scripted.ts: the scripted successor has logit 40, end of generation 20, the rest 0;
// a near tie's runner-up sits ln(0.55/0.45) below).
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { loadModel, type Context, type GenerateResult, type Model } from '../../src/index.js';
import { ONE_THREAD } from '../helpers/models.js';
import { SCRIPTED_LOGITS, expectWithin, scriptedLogprobTolerance } from '../helpers/tolerance.js';
import { COLOR_QUESTION, JSON_QUESTION, WEATHER_JSON, WEATHER_SCHEMA, chatPrompt, ensureSurfaceModels, type SurfaceModels } from '../server/surface-fixtures.js';

const EXACT = { temperature: 1, topK: 0, topP: 1, minP: 0 } as const;

let models: SurfaceModels;
let jsonModel: Model;
let colorModel: Model;
let jctx: Context;
let cctx: Context;

beforeAll(async () => {
  models = await ensureSurfaceModels();
  jsonModel = await loadModel(models.json.path);
  colorModel = await loadModel(models.color.path);
  jctx = await jsonModel.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 4 });
  cctx = await colorModel.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 2 });
});
afterAll(async () => {
  await jctx.dispose();
  await cctx.dispose();
  await jsonModel.dispose();
  await colorModel.dispose();
});

const jsonPrompt = () => ({ prompt: chatPrompt(JSON_QUESTION), parseSpecial: true, temperature: 0 });
const colorPrompt = () => ({ prompt: chatPrompt(COLOR_QUESTION), parseSpecial: true });

describe('responseFormat', () => {
  it('a JSON Schema (plain or zod) ends the output with the value; streamed text events add up to it', async () => {
    expect((await jctx.complete(jsonPrompt())).text).toBe(`${WEATHER_JSON} Done.`);
    const r = await jctx.complete({ ...jsonPrompt(), responseFormat: { jsonSchema: WEATHER_SCHEMA } });
    expect([r.text, r.finishReason, r.generatedTokens]).toEqual([WEATHER_JSON, 'eog', 4]);
    const zod = z.object({ city: z.string(), temp: z.number().int() }).strict();
    expect((await jctx.complete({ ...jsonPrompt(), responseFormat: { jsonSchema: zod } })).text).toBe(WEATHER_JSON);
    let streamed = '';
    for await (const ev of jctx.generate({ ...jsonPrompt(), responseFormat: { type: 'json' } })) if (ev.type === 'text') streamed += ev.text;
    expect(streamed).toBe(WEATHER_JSON);
    expect((await jctx.complete({ ...jsonPrompt(), responseFormat: { type: 'text' } })).text).toBe(`${WEATHER_JSON} Done.`);
  });

  it('refuses a schema no value satisfies, and grammar or tools beside it (INVALID_ARGUMENT)', async () => {
    expect(() => jctx.generate({ ...jsonPrompt(), responseFormat: { jsonSchema: { type: 'object', properties: { a: { enum: [] } }, required: ['a'] } } })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/responseFormat: the schema at \/properties\/a cannot be compiled/) }),
    );
    expect(() => jctx.generate({ ...jsonPrompt(), responseFormat: { type: 'json' }, grammar: 'root ::= "x"' })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('responseFormat and grammar') }));
    expect(() => jctx.generate({ ...jsonPrompt(), responseFormat: { type: 'json' }, tools: [{ name: 'f' }] })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('responseFormat and tools') }));
    expect(() => jctx.generate({ ...jsonPrompt(), responseFormat: { type: 'yaml' } as never })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});

describe('logprobs', () => {
  it('one entry per generated token (a stop string\'s too), on text events and the result; greedy picks are the top-1', async () => {
    const events: NonNullable<GenerateResult['logprobs']> = [];
    const gen = jctx.generate({ ...jsonPrompt(), logprobs: 3, emitTokenIds: true, stop: [' Done'] });
    for await (const ev of gen) if (ev.type === 'text' && ev.logprobs) events.push(...ev.logprobs);
    const r = await gen.result;
    expect(r.text).toBe(WEATHER_JSON);
    expect(r.logprobs).toHaveLength(r.generatedTokens);
    expect(r.logprobs!.map((l) => l.token)).toEqual(Array.from(r.tokens!));
    expect(r.logprobs!.slice(0, events.length)).toEqual(events);
    for (const l of r.logprobs!) {
      expect(l.top).toHaveLength(3);
      expect(l.top[0]).toEqual({ token: l.token, logprob: l.logprob });
      expect(l.top[1]!.token).toBe(models.json.eos);
      expectWithin(l.top[1]!.logprob, SCRIPTED_LOGITS.eos - SCRIPTED_LOGITS.script, scriptedLogprobTolerance(models.json));
      expect(l.logprob).toBeLessThanOrEqual(0);
    }
    const zero = await jctx.complete({ ...jsonPrompt(), logprobs: 0 });
    expect(zero.logprobs!.every((l) => l.top.length === 0)).toBe(true);
    expect((await jctx.complete(jsonPrompt())).logprobs).toBeUndefined();
  });

  it('are the model\'s distribution: before temperature and logit bias', async () => {
    // float32 forward pass and log-softmax, any CPU variant (test/helpers/tolerance.ts): ~1.3e-3,
    // where temperature 0.3 would move ln 0.55 by 0.18
    const tolerance = scriptedLogprobTolerance(models.color);
    const blue = models.color.tokens.Blue!;
    const red = models.color.tokens.Red!;
    for (const extra of [{ temperature: 0.3, seed: 1 }, { temperature: 0, logitBias: { [red]: -Infinity } }]) {
      const r = await cctx.complete({ ...colorPrompt(), ...extra, logprobs: 2 });
      const first = r.logprobs![0]!;
      expect(first.top.map((t) => t.token)).toEqual([red, blue]);
      expectWithin(first.top[0]!.logprob, Math.log(0.55), tolerance);
      expectWithin(first.top[1]!.logprob, Math.log(0.45), tolerance);
    }
    const banned = await cctx.complete({ ...colorPrompt(), temperature: 0, logitBias: { [red]: -Infinity }, logprobs: 1 });
    expect(banned.text).toBe('Blue.');
    expect(banned.logprobs![0]!.token).toBe(blue);
    expectWithin(banned.logprobs![0]!.logprob, Math.log(0.45), tolerance);
  });

  it('refuses more than 20 alternatives', () => {
    expect(() => jctx.generate({ ...jsonPrompt(), logprobs: 21 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});

describe('generateChoices', () => {
  it('n greedy choices from one prefill: identical, each decodes only the last prompt token', async () => {
    const gens = await jctx.generateChoices({ ...jsonPrompt(), n: 4 });
    const rs = await Promise.all(gens.map((g) => g.result));
    const n = models.json.scripts.json!.promptTokens.length;
    for (const r of rs) {
      expect(r.text).toBe(`${WEATHER_JSON} Done.`);
      expect([r.promptTokens, r.reusedTokens, r.prefilledTokens]).toEqual([n, n - 1, 1]);
    }
  });

  it('seeded choices: choice i is the single generation with seed + i, more choices than sequences included', async () => {
    const gens = await cctx.generateChoices({ ...colorPrompt(), ...EXACT, seed: 0, n: 6 });
    const texts = (await Promise.all(gens.map((g) => g.result))).map((r) => r.text);
    for (const t of texts) expect(['Red.', 'Blue.']).toContain(t);
    expect(new Set(texts).size).toBe(2);
    const singles: string[] = [];
    for (let i = 0; i < 6; i++) singles.push((await cctx.complete({ ...colorPrompt(), ...EXACT, seed: i })).text);
    expect(singles).toEqual(texts);
    expect(cctx.cacheStats().sessions).toBe(0); // the forks ended with their generations
  });

  it('one sequence: the forks start in the RAM tier and the choices run one after another (it used to wait forever)', async () => {
    const one = await jsonModel.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 1 });
    try {
      const gens = await one.generateChoices({ ...jsonPrompt(), n: 3 });
      const rs = await Promise.all(gens.map((g) => g.result));
      const n = models.json.scripts.json!.promptTokens.length;
      for (const r of rs) {
        expect(r.text).toBe(`${WEATHER_JSON} Done.`);
        expect(r.reusedTokens).toBe(n - 1);
      }
      // the forks end with their generations (their end commands follow the results)
      await vi.waitFor(() => expect(one.cacheStats().sessions).toBe(0));
    } finally {
      await one.dispose();
    }
    const noRam = await jsonModel.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 1, cacheRamMb: 0 });
    try {
      await expect(noRam.generateChoices({ ...jsonPrompt(), n: 2 })).rejects.toMatchObject({ code: 'KV_CACHE_FULL' });
    } finally {
      await noRam.dispose();
    }
  });

  it('refuses n outside 1..128 and a sessionId', async () => {
    for (const n of [0, 129, 1.5]) await expect(jctx.generateChoices({ ...jsonPrompt(), n })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(jctx.generateChoices({ ...jsonPrompt(), n: 2, sessionId: 's' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});
