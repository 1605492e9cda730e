// POST /v1/completions (OpenAI's legacy text completions: a raw prompt, no chat template) and
// llama-server's POST /tokenize and /detokenize.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import type { TokenLogprob } from '../engine/events.js';
import type { Generation } from '../engine/generation.js';
import type { GenerateOptions } from '../options.js';
import { HttpError, SseWriter, errorBody, parseBody, readJson, sendJson, toHttpError, reportedError } from './http.js';
import { completionLogprobs } from './logprobs.js';
import { MAX_CHOICES, ResponseFormatBody, responseFormatOption } from './openai.js';
import type { HandlerOptions } from './openai.js';
import { fitPrompt } from './overflow.js';
import { nullable, samplingFields, samplingOptions } from './sampling-fields.js';
import type { ChatService } from './service.js';
import { infillTokens } from '../engine/infill.js';

const tokenIds = z.array(z.number().int().min(0));

export const CompletionRequestSchema = z
  .object({
    model: z.string().min(1).max(256),
    /** One prompt: text (tokenized with BOS, special-token text not parsed) or token ids. */
    prompt: z.union([z.string(), z.array(z.string()).length(1), tokenIds.min(1), z.array(tokenIds.min(1)).length(1)]),
    stream: nullable(z.boolean()),
    stream_options: nullable(z.object({ include_usage: z.boolean().optional(), include_obfuscation: z.boolean().optional() }).strict()),
    max_tokens: nullable(z.number().int().positive()),
    ...samplingFields,
    stop: nullable(z.union([z.string().min(1), z.array(z.string().min(1)).max(16)])),
    n: nullable(z.number().int().min(1).max(MAX_CHOICES)),
    best_of: nullable(z.number().int().min(1).max(MAX_CHOICES)),
    /** The k most likely tokens at each position, besides the sampled one's logprob. */
    logprobs: nullable(z.number().int().min(0).max(20)),
    echo: nullable(z.boolean()),
    /** Fill-in-the-middle: the text after the completion (the prompt is the text before it); needs a model with FIM tokens. */
    suffix: nullable(z.string()),
    response_format: ResponseFormatBody.optional(),
    user: z.string().optional(),
  })
  .strict();
type CompletionRequest = z.output<typeof CompletionRequestSchema>;

function generateOptions(b: CompletionRequest): Omit<GenerateOptions, 'prompt'> {
  const g: Omit<GenerateOptions, 'prompt'> = { stop: b.stop == null ? [] : typeof b.stop === 'string' ? [b.stop] : b.stop };
  if (b.max_tokens != null) g.maxTokens = b.max_tokens;
  Object.assign(g, samplingOptions(b));
  if (b.logprobs != null) g.logprobs = b.logprobs;
  const rf = responseFormatOption(b.response_format, false);
  if (rf) g.responseFormat = rf;
  return g;
}

/** The prompt as tokens: text is tokenized off the event loop (bounded by --max-prompt-bytes). */
async function promptTokensOf(service: ChatService, b: CompletionRequest, maxPromptBytes: number, signal: AbortSignal): Promise<{ tokens: Int32Array; text: string }> {
  const p = Array.isArray(b.prompt) && (typeof b.prompt[0] === 'string' || Array.isArray(b.prompt[0])) ? b.prompt[0]! : b.prompt;
  if (typeof p === 'string') {
    const bytes = Buffer.byteLength(p) + Buffer.byteLength(b.suffix ?? '');
    if (bytes > maxPromptBytes) throw new HttpError(413, 'too_large', `The prompt holds ${bytes} bytes of text, over this server's limit of ${maxPromptBytes} (--max-prompt-bytes)`);
    if (b.suffix != null) return { tokens: await infillTokens(service.model, { prefix: p, suffix: b.suffix }, signal), text: p };
    return { tokens: await service.model.tokenize(p, { addSpecial: true, parseSpecial: false, signal }), text: p };
  }
  if (b.suffix != null) throw new HttpError(400, 'invalid_request', 'suffix (fill-in-the-middle) needs the prompt as text', 'suffix');
  const ids = p as number[];
  const n = service.model.vocab.size;
  const bad = ids.findIndex((t) => t >= n);
  if (bad >= 0) throw new HttpError(400, 'invalid_request', `prompt token ${ids[bad]} (index ${bad}) is outside the vocabulary (${n} tokens)`, 'prompt');
  const tokens = Int32Array.from(ids);
  return { tokens, text: service.model.detokenize(tokens, { special: true }) };
}

function finishReason(reason: string): 'stop' | 'length' {
  return reason === 'length' ? 'length' : 'stop';
}

export async function handleCompletions(req: IncomingMessage, res: ServerResponse, service: ChatService, o: HandlerOptions & { maxPromptBytes: number }): Promise<void> {
  const { signal } = o;
  const body = parseBody(CompletionRequestSchema, await readJson(req, o.maxBodyBytes));
  const n = body.n ?? 1;
  if (body.best_of != null && body.best_of !== n) throw new HttpError(400, 'invalid_request', 'best_of must equal n on this server (every choice is returned)', 'best_of');
  if (body.echo && body.logprobs != null) throw new HttpError(400, 'invalid_request', 'echo with logprobs is not supported by this server (prompt tokens have no logprobs here)', 'echo');
  const options = { ...generateOptions(body), ...service.adapters.options(body.lora) };
  const prompt = await promptTokensOf(service, body, o.maxPromptBytes, signal);
  const fitted = fitPrompt(prompt.tokens, service.context.settings.sequenceContextSize, body.max_tokens ?? undefined, service.overflow);
  const headers: Record<string, string> = {};
  if (fitted.truncatedTokens > 0) headers['x-llamux-truncated-tokens'] = String(fitted.truncatedTokens);
  const run = { ...options, ...service.shiftOptions, prompt: fitted.tokens, signal, ...(o.tenant !== undefined ? { cacheScope: `tenant:${o.tenant}` } : {}) };
  service.metrics.inFlight++;
  let gens: Generation[];
  try {
    gens = n > 1 ? await service.context.generateChoices({ ...run, n }) : [service.context.generate(run)];
  } catch (e) {
    service.metrics.inFlight--;
    throw e;
  }
  const id = `cmpl-${randomBytes(12).toString('hex')}`;
  const created = Math.floor(Date.now() / 1000);
  const fingerprint = `llamux-${service.fingerprint.slice(0, 12)}`;
  const echo = body.echo ? prompt.text : '';
  const usageOf = (results: { promptTokens: number; generatedTokens: number; reusedTokens: number; timings: { draftedTokens: number; acceptedTokens: number } }[]) => {
    const completion = results.reduce((a, r) => a + r.generatedTokens, 0);
    const drafted = results.reduce((a, r) => a + r.timings.draftedTokens, 0);
    const accepted = results.reduce((a, r) => a + r.timings.acceptedTokens, 0);
    const u = {
      prompt_tokens: results[0]!.promptTokens,
      completion_tokens: completion,
      total_tokens: results[0]!.promptTokens + completion,
      prompt_tokens_details: { cached_tokens: results[0]!.reusedTokens },
      // speculative decoding (--spec): the predicted-output counters, as in chat completions
      ...(drafted > 0 ? { completion_tokens_details: { accepted_prediction_tokens: accepted, rejected_prediction_tokens: drafted - accepted } } : {}),
    };
    return fitted.truncatedTokens > 0 ? { ...u, truncated_tokens: fitted.truncatedTokens } : u;
  };
  const record = (r: Awaited<Generation['result']>) =>
    service.metrics.recordGeneration({
      promptTokens: r.promptTokens,
      reusedTokens: r.reusedTokens,
      prefilledTokens: r.prefilledTokens,
      generatedTokens: r.generatedTokens,
      ttftMs: r.timings.ttftMs,
      cacheOutcome: r.cache.outcome,
      ...(r.cache.tier ? { cacheTier: r.cache.tier } : {}),
    });
  try {
    if (!body.stream) {
      const results = await Promise.all(gens.map((g) => g.result));
      results.forEach(record);
      sendJson(
        res,
        200,
        {
          id,
          object: 'text_completion',
          created,
          model: body.model,
          system_fingerprint: fingerprint,
          choices: results.map((r, index) => {
            let logprobs = null;
            if (r.logprobs) {
              const { next: _next, ...lp } = completionLogprobs(service.model, r.logprobs, echo.length);
              logprobs = lp;
            }
            return { text: echo + r.text, index, logprobs, finish_reason: finishReason(r.finishReason) };
          }),
          usage: usageOf(results),
        },
        headers,
      );
      return;
    }
    // Errors before the first byte keep their status: the first event of every choice first.
    const iters = gens.map((g) => g[Symbol.asyncIterator]());
    const firsts = await Promise.all(iters.map((it) => it.next()));
    const sse = new SseWriter(res, headers, o.sendTimeoutMs, service.metrics);
    const chunk = (index: number, text: string, finish: string | null, lps?: TokenLogprob[], offset = 0) => {
      let logprobs = null;
      if (body.logprobs != null && lps) {
        const { next: _next, ...lp } = completionLogprobs(service.model, lps, offset);
        logprobs = lp;
      }
      return { id, object: 'text_completion', created, model: body.model, system_fingerprint: fingerprint, choices: [{ text, index, logprobs, finish_reason: finish }] };
    };
    let sending: Promise<void> = Promise.resolve();
    const send = (v: unknown) => (sending = sending.then(() => sse.send(v)));
    try {
      const results = await Promise.all(
        iters.map(async (it, index) => {
          let offset = echo.length;
          let seen = 0; // logprob entries already sent with text
          if (echo) await send(chunk(index, echo, null));
          for (let r = firsts[index]!; !r.done; r = await it.next()) {
            const ev = r.value;
            if (ev.type === 'text') {
              if (ev.text.length > 0 || ev.logprobs?.length) await send(chunk(index, ev.text, null, ev.logprobs, offset));
              offset += ev.text.length;
              seen += ev.logprobs?.length ?? 0;
            } else if (ev.type === 'final') {
              const rest = ev.logprobs?.slice(seen);
              await send(chunk(index, '', finishReason(ev.finishReason), rest, offset));
              return ev;
            }
          }
          throw new HttpError(500, 'server', 'The generation ended without a final event');
        }),
      );
      results.forEach(record);
      if (body.stream_options?.include_usage) {
        await send({ id, object: 'text_completion', created, model: body.model, system_fingerprint: fingerprint, choices: [], usage: usageOf(results) });
      }
      await send('[DONE]');
    } catch (e) {
      for (const g of gens) g.cancel();
      const err = reportedError(e, signal);
      if (err) {
        await sending.catch(() => {});
        await sse.send(errorBody('openai', err).body);
      }
    } finally {
      sse.end();
    }
  } catch (e) {
    // One choice failing ends the others.
    for (const g of gens) g.cancel();
    throw e;
  } finally {
    service.metrics.inFlight--;
  }
}

const TokenizeRequestSchema = z
  .object({
    /** The model whose vocabulary is used (a router picks it by this name; ignored by a single-model server). */
    model: z.string().max(256).optional(),
    content: z.string(),
    /** Add BOS etc. (default false, as llama-server). */
    add_special: z.boolean().optional(),
    /** Parse special-token text such as "<|im_start|>" (default false: never for untrusted text). */
    parse_special: z.boolean().optional(),
    /** Tokens as `{ id, piece }` (the piece as text; invalid UTF-8 as a byte array). */
    with_pieces: z.boolean().optional(),
  })
  .strict();

const DetokenizeRequestSchema = z.object({ model: z.string().max(256).optional(), tokens: z.array(z.number().int().min(0)) }).strict();

/** POST /tokenize (llama-server's shape): `{ tokens }`. */
export async function handleTokenize(req: IncomingMessage, res: ServerResponse, service: ChatService, o: HandlerOptions & { maxPromptBytes: number }): Promise<void> {
  const b = parseBody(TokenizeRequestSchema, await readJson(req, o.maxBodyBytes));
  const bytes = Buffer.byteLength(b.content);
  if (bytes > o.maxPromptBytes) throw new HttpError(413, 'too_large', `content holds ${bytes} bytes of text, over this server's limit of ${o.maxPromptBytes} (--max-prompt-bytes)`);
  const tokens = await service.model.tokenize(b.content, { addSpecial: b.add_special ?? false, parseSpecial: b.parse_special ?? false, signal: o.signal });
  if (!b.with_pieces) {
    sendJson(res, 200, { tokens: Array.from(tokens) });
    return;
  }
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  const pieces = Array.from(tokens, (id) => {
    const raw = service.model.tokenPiece(id, { special: true });
    let piece: string | number[];
    try {
      piece = utf8.decode(raw);
    } catch {
      piece = Array.from(raw);
    }
    return { id, piece };
  });
  sendJson(res, 200, { tokens: pieces });
}

/** POST /detokenize (llama-server's shape): `{ content }`; control tokens are rendered. */
export async function handleDetokenize(req: IncomingMessage, res: ServerResponse, service: ChatService, o: HandlerOptions): Promise<void> {
  const b = parseBody(DetokenizeRequestSchema, await readJson(req, o.maxBodyBytes));
  const n = service.model.vocab.size;
  const bad = b.tokens.findIndex((t) => t >= n);
  if (bad >= 0) throw new HttpError(400, 'invalid_request', `tokens.${bad}: token ${b.tokens[bad]} is outside the vocabulary (${n} tokens)`, `tokens.${bad}`);
  sendJson(res, 200, { content: service.model.detokenize(Int32Array.from(b.tokens), { special: true }) });
}
