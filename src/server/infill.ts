// POST /infill (llama-server's shape, what editor plugins such as llama.vim and llama.vscode
// send): fill-in-the-middle with the model's FIM tokens (src/engine/infill.ts). The answer is
// llama-server's /completion shape: `content` and the counts, streamed as `data: {content}`.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { FinishReason } from '../engine/events.js';
import { HttpError, SseWriter, errorBody, parseBody, readJson, reportedError, sendJson } from './http.js';
import type { HandlerOptions } from './openai.js';
import { nullable, samplingFields, samplingOptions } from './sampling-fields.js';
import type { ChatService } from './service.js';

const InfillRequestSchema = z
  .object({
    model: z.string().max(256).optional(),
    input_prefix: z.string(),
    input_suffix: z.string(),
    /** Other files for context: `{ filename, text }` chunks, before the prefix. */
    input_extra: z.array(z.object({ filename: z.string().max(4096).optional(), text: z.string() }).strict()).max(1024).optional(),
    /** Text after input_prefix (the part of the current line before the cursor). */
    prompt: z.string().optional(),
    n_predict: nullable(z.number().int()),
    max_tokens: nullable(z.number().int().positive()),
    stream: nullable(z.boolean()),
    stop: nullable(z.union([z.string().min(1), z.array(z.string().min(1)).max(16)])),
    ...samplingFields,
  })
  .strict();

type Stats = { promptTokens: number; reusedTokens: number; generatedTokens: number; finishReason: string; stop?: string };

function summary(r: Stats) {
  return {
    stop: true,
    stop_type: r.finishReason === FinishReason.Length ? 'limit' : r.finishReason === FinishReason.Stop ? 'word' : 'eos',
    ...(r.stop !== undefined ? { stopping_word: r.stop } : {}),
    tokens_predicted: r.generatedTokens,
    tokens_evaluated: r.promptTokens,
    tokens_cached: r.reusedTokens,
    truncated: false,
  };
}

export async function handleInfill(req: IncomingMessage, res: ServerResponse, service: ChatService, o: HandlerOptions & { maxPromptBytes: number }): Promise<void> {
  const b = parseBody(InfillRequestSchema, await readJson(req, o.maxBodyBytes));
  const prefix = b.input_prefix + (b.prompt ?? '');
  const bytes = Buffer.byteLength(prefix) + Buffer.byteLength(b.input_suffix) + (b.input_extra ?? []).reduce((a, e) => a + Buffer.byteLength(e.text), 0);
  if (bytes > o.maxPromptBytes) throw new HttpError(413, 'too_large', `The infill input holds ${bytes} bytes of text, over this server's limit of ${o.maxPromptBytes} (--max-prompt-bytes)`);
  const maxTokens = b.max_tokens ?? (b.n_predict != null && b.n_predict >= 0 ? b.n_predict : undefined);
  const gen = service.context.infill({
    prefix,
    suffix: b.input_suffix,
    ...(b.input_extra ? { extra: b.input_extra } : {}),
    ...samplingOptions(b),
    ...service.adapters.options(b.lora),
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    stop: b.stop == null ? [] : typeof b.stop === 'string' ? [b.stop] : b.stop,
    signal: o.signal,
    ...(o.tenant !== undefined ? { cacheScope: `tenant:${o.tenant}` } : {}),
  });
  service.metrics.inFlight++;
  try {
    if (!b.stream) {
      const r = await gen.result;
      sendJson(res, 200, { content: r.text, ...summary(r) });
      return;
    }
    const sse = new SseWriter(res, {}, o.sendTimeoutMs, service.metrics);
    try {
      for await (const ev of gen) {
        if (ev.type === 'text') await sse.send({ content: ev.text, stop: false });
        else if (ev.type === 'final') await sse.send({ content: '', ...summary(ev) });
      }
    } catch (e) {
      const err = reportedError(e, o.signal);
      if (err) await sse.send(errorBody('openai', err).body);
    } finally {
      sse.end();
    }
  } finally {
    service.metrics.inFlight--;
  }
}
