// The inside of a prompt worker (see prompt-pool.ts): loads the model's vocabulary only, and
// renders and tokenizes chat prompts off the server's event loop.
import { parentPort, workerData } from 'node:worker_threads';
import { buildChatPrompt, type ChatPrompt, type MarkerTexts, type ReplaySpan } from '../chat/prompt.js';
import { ChatTemplate } from '../chat/template.js';
import type { TurnReplay } from '../chat/turn-replay.js';
import type { ChatMessage, ChatToolDefinition } from '../chat/types.js';
import { native } from '../native/binding.js';
import { isLlamuxError } from '../errors.js';
import { loadModel } from '../model/load.js';
import { markOffsets, type PromptMarks } from './prompt-marks.js';

/** What the pool hands a new worker. */
export interface PromptWorkerData {
  /** Int32Array(1) over it: non-zero stops the job's tokenizer calls (the pool's time cap). */
  cancel?: SharedArrayBuffer;
  modelPath: string;
  templateSource: string;
  bosToken: string;
  eosToken: string;
  markers?: MarkerTexts;
  /** The most tokens a prompt may have (tokenizing stops past it: CONTEXT_OVERFLOW). */
  maxTokens?: number;
}

export interface PromptJobMessage {
  id: number;
  messages: ChatMessage[];
  tools: ChatToolDefinition[];
  /** Stored spans by tool-call id. */
  replay: Record<string, ReplaySpan>;
  /** Extra template variables (`chat_template_kwargs`, e.g. `enable_thinking`). */
  variables?: Record<string, unknown>;
  /** Media placeholders in the messages and their tokens (src/chat/media.ts prepareChatMedia). */
  media?: Array<[string, Int32Array]>;
  /** Exact tokens of whole assistant turns, by message index. */
  turns?: Record<number, TurnReplay>;
  /** Keep replayed turns as generated after a new user message. */
  keepReasoning?: boolean;
  /** Token positions to locate (prompt-cache breakpoints, cache-breakpoints.ts; prompt-marks.ts). */
  marks?: PromptMarks;
}

export type PromptWorkerReply =
  | { type: 'ready' }
  | { type: 'fatal'; message: string }
  | { type: 'result'; id: number; tokens: Int32Array; replayed: string[]; unknown: string[]; unlocated: string[]; rerendered: string[]; splicedTokens: number; turns: ChatPrompt['turns']; markTokens: number[] }
  | { type: 'error'; id: number; code: string; message: string };

async function main(): Promise<void> {
  const port = parentPort!;
  const data = workerData as PromptWorkerData;
  // Background work on untrusted text: below the event loop and the engine thread.
  native.lowerThreadPriority(10);
  const model = await loadModel(data.modelPath, { vocabOnly: true });
  if (data.cancel) model.setTokenizeCancelFlag(new Int32Array(data.cancel));
  const template = new ChatTemplate(data.templateSource, { bosToken: data.bosToken, eosToken: data.eosToken });
  // Warm up before the first job (the template, the tokenizer's vocabulary index, the control
  // token list): none of it can be stopped by the time cap, so none of it should be in a job.
  try {
    buildChatPrompt(model, [{ role: 'user', content: 'hi </s>' }], { template, ...(data.markers ? { markers: data.markers } : {}) });
  } catch {
    // a template that refuses this conversation refuses it again in a job, with its message
  }
  port.on('message', (job: PromptJobMessage | 'quit') => {
    if (job === 'quit') {
      // Asked to leave (the pool gave up on this worker): exit between native calls, which is
      // the only safe moment (terminating a thread inside a tokenizer call aborts the process).
      void model.dispose().finally(() => process.exit(0));
      return;
    }
    let reply: PromptWorkerReply;
    try {
      const p = buildChatPrompt(model, job.messages, {
        template,
        tools: job.tools,
        ...(job.variables ? { variables: job.variables } : {}),
        ...(data.markers ? { markers: data.markers } : {}),
        replay: (call) => job.replay[call.id],
        ...(job.turns ? { replayTurn: (_m: ChatMessage, i: number) => job.turns![i], keepReasoning: job.keepReasoning ?? false } : {}),
        ...(job.media ? { media: new Map(job.media) } : {}),
        ...(data.maxTokens !== undefined ? { maxTokens: data.maxTokens } : {}),
        ...(job.marks
          ? { marks: (text: string) => markOffsets(text, job.marks!, (v) => template.renderUnchecked(v.messages, v.tools, true, job.variables)) }
          : {}),
      });
      reply = { type: 'result', id: job.id, tokens: p.tokens, replayed: p.replayed, unknown: p.unknown, unlocated: p.unlocated, rerendered: p.rerendered, splicedTokens: p.splicedTokens, turns: p.turns, markTokens: p.markTokens };
      port.postMessage(reply, [p.tokens.buffer as ArrayBuffer]);
      return;
    } catch (e) {
      let message = e instanceof Error ? e.message : String(e);
      if (isLlamuxError(e, 'CONTEXT_OVERFLOW') && data.maxTokens !== undefined) {
        message = `The prompt has more than ${data.maxTokens} tokens but a sequence of this server's context holds ${data.maxTokens + 1}; shorten the conversation, start the server with a larger --ctx, or with --overflow truncate-middle`;
      }
      reply = { type: 'error', id: job.id, code: isLlamuxError(e) ? e.code : 'INTERNAL', message };
    }
    port.postMessage(reply);
  });
  port.postMessage({ type: 'ready' } satisfies PromptWorkerReply);
}

main().catch((e: unknown) => {
  parentPort?.postMessage({ type: 'fatal', message: e instanceof Error ? e.message : String(e) } satisfies PromptWorkerReply);
});
