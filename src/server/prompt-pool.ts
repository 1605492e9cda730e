// Chat prompts are rendered and tokenized in worker threads, never on the server's event loop:
// llama.cpp's tokenizers are super-linear on some inputs (a run of characters the vocabulary
// lacks, many control-token-like strings), and one such request must not stall /health and every
// other client. Each worker loads the model file with `vocabOnly: true`. A job that runs past the
// time cap (or whose request was aborted) gets a 413 at once, and its worker is told to stop
// through a flag shared with it: the native tokenizer works in bounded pieces and checks the flag
// between them, so the worker is free again within milliseconds. A worker that does not answer
// within `cancelGraceMs` (stuck outside the tokenizer) is retired instead (it exits when its
// native call returns: a thread cannot be terminated inside one without aborting the process) and
// a fresh one takes its place. At most `size` retired workers may still be running: beyond that,
// requests wait (and get a 503 after 30 s), so hostile requests cannot pile up CPU work.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { ChatPrompt, MarkerTexts, ReplaySpan } from '../chat/prompt.js';
import type { TurnReplay } from '../chat/turn-replay.js';
import type { ChatMessage, ChatToolDefinition } from '../chat/types.js';
import { LlamuxError, type LlamuxErrorCode } from '../errors.js';
import { HttpError } from './http.js';
import type { PromptMarks } from './prompt-marks.js';
import type { PromptJobMessage, PromptWorkerData, PromptWorkerReply } from './prompt-worker.js';

/** A rendered and tokenized prompt, as the worker returns it. */
export interface BuiltPrompt {
  tokens: Int32Array;
  replayed: string[];
  unknown: string[];
  unlocated: string[];
  rerendered: string[];
  splicedTokens: number;
  turns: ChatPrompt['turns'];
  /** With `marks`: each mark's token position (0: it could not be located). */
  markTokens: number[];
}

export interface PromptPoolOptions extends PromptWorkerData {
  /** Workers at most (started on demand; the first by start()). */
  size: number;
  /** A job running longer than this is stopped by terminating its worker. */
  timeoutMs: number;
}

// The worker is started from a CommonJS bootstrap (`eval: true`) that imports the entry module.
// From the TypeScript sources (tests, tsx) the worker registers tsx first: workers do not inherit
// the loader hooks of the thread that starts them.
const BOOTSTRAP = `'use strict';
const { workerData, parentPort } = require('node:worker_threads');
(async () => {
  if (workerData.tsx) {
    const m = await import(workerData.tsx);
    (m.register ?? m.default.register)();
  }
  await import(workerData.entry);
})().catch((e) => parentPort.postMessage({ type: 'fatal', message: String((e && e.stack) || e) }));
`;

function entryPoints(): { entry: string; tsx?: string } {
  const self = import.meta.url;
  if (!/\.ts$/.test(new URL(self).pathname)) return { entry: new URL('./prompt-worker.js', self).href };
  // The ESM build of tsx's API (the CommonJS one cannot be imported from a worker).
  const tsx = pathToFileURL(createRequire(self).resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;
  return { entry: new URL('./prompt-worker.ts', self).href, tsx };
}

/** Jobs with less text than this (UTF-16 units) wait ahead of larger ones. */
const SMALL_JOB = 65_536;

interface Job {
  id: number;
  queuedAt: number;
  /** Text length of its messages: small jobs go first, so large (hostile) ones cannot delay them. */
  size: number;
  message: PromptJobMessage;
  resolve: (p: BuiltPrompt) => void;
  reject: (e: unknown) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

interface Slot {
  worker: Worker;
  ready: Promise<void>;
  job?: Job;
  timer?: NodeJS.Timeout;
  dead: boolean;
  /** Shared with the worker: non-zero stops its tokenizer calls. */
  cancel: Int32Array;
  /** A job told to stop whose worker has not answered yet. */
  stopping?: { id: number; at: number; timer: NodeJS.Timeout };
}

/** How long a worker told to stop may take before it is retired. */
const cancelGraceMs = 2000;

let nextJobId = 1;

export class PromptPool {
  readonly #o: PromptPoolOptions;
  readonly #slots = new Set<Slot>();
  readonly #queue: Job[] = [];
  readonly #readySlots = new WeakSet<Slot>();
  /** Retired workers still inside a native call. */
  readonly #zombies = new Set<Worker>();
  #closed = false;
  #waitTimer: NodeJS.Timeout | undefined;
  /** Jobs stopped by the time cap. */
  timeouts = 0;
  /** Workers retired because they did not stop in time. */
  retired = 0;
  /** How long each of the last stopped jobs took to free its worker, in ms (newest last, at most 64). */
  readonly stopLatencies: number[] = [];

  constructor(options: PromptPoolOptions) {
    this.#o = options;
  }

  /** Starts the first worker and waits until it has loaded the vocabulary. */
  async start(): Promise<void> {
    await this.#spawn().ready;
  }

  #spawn(): Slot {
    const { entry, tsx } = entryPoints();
    const cancel = new Int32Array(new SharedArrayBuffer(4));
    const data: PromptWorkerData & { entry: string; tsx?: string } = {
      cancel: cancel.buffer as SharedArrayBuffer,
      modelPath: this.#o.modelPath,
      templateSource: this.#o.templateSource,
      bosToken: this.#o.bosToken,
      eosToken: this.#o.eosToken,
      ...(this.#o.markers ? { markers: this.#o.markers } : {}),
      ...(this.#o.maxTokens !== undefined ? { maxTokens: this.#o.maxTokens } : {}),
      entry,
      ...(tsx ? { tsx } : {}),
    };
    const worker = new Worker(BOOTSTRAP, { eval: true, workerData: data, execArgv: [] });
    worker.unref();
    let readyResolve!: () => void;
    let readyReject!: (e: unknown) => void;
    const slot: Slot = {
      worker,
      cancel,
      dead: false,
      ready: new Promise<void>((resolve, reject) => {
        readyResolve = resolve;
        readyReject = reject;
      }),
    };
    slot.ready.catch(() => {});
    let isReady = false;
    const fail = (message: string): void => {
      if (slot.dead) return;
      this.#retire(slot, true);
      const err = new LlamuxError('INTERNAL', `The prompt worker failed: ${message}`);
      if (!isReady) readyReject(err);
      if (slot.job) this.#finish(slot, (j) => j.reject(err));
      this.#pump();
    };
    worker.on('message', (m: PromptWorkerReply) => {
      if (m.type === 'ready') {
        isReady = true;
        this.#readySlots.add(slot);
        readyResolve();
        this.#pump();
      } else if (m.type === 'fatal') fail(m.message);
      else {
        if (slot.stopping && slot.stopping.id === m.id) {
          // The job told to stop has left the worker: it is free again.
          clearTimeout(slot.stopping.timer);
          this.stopLatencies.push(performance.now() - slot.stopping.at);
          if (this.stopLatencies.length > 64) this.stopLatencies.shift();
          slot.stopping = undefined;
          Atomics.store(slot.cancel, 0, 0);
          if (!slot.dead) slot.worker.unref();
          this.#pump();
          return;
        }
        const job = slot.job;
        if (!job || job.id !== m.id) return;
        if (m.type === 'result') {
          const { tokens, replayed, unknown, unlocated, rerendered, splicedTokens, turns, markTokens } = m;
          this.#finish(slot, (j) => j.resolve({ tokens, replayed, unknown, unlocated, rerendered, splicedTokens, turns, markTokens }));
        } else this.#finish(slot, (j) => j.reject(new LlamuxError(m.code as LlamuxErrorCode, m.message)));
        this.#pump();
      }
    });
    worker.on('error', (e) => fail(e.message));
    worker.on('exit', (code) => {
      if (this.#zombies.delete(worker)) this.#pump();
      fail(`it exited with code ${code}`);
    });
    this.#slots.add(slot);
    return slot;
  }

  /**
   * Takes a worker out of the pool. It is asked to leave rather than terminated: a worker
   * terminated inside a native call (a tokenizer call, or the model load) aborts the whole
   * process, so it exits by itself between calls. `broken`: its script failed, nothing native
   * is running, terminate it.
   */
  #retire(slot: Slot, broken = false): void {
    slot.dead = true;
    if (slot.timer) clearTimeout(slot.timer);
    if (slot.stopping) clearTimeout(slot.stopping.timer);
    Atomics.store(slot.cancel, 0, 1);
    this.#slots.delete(slot);
    if (broken) {
      void slot.worker.terminate();
      return;
    }
    this.#zombies.add(slot.worker);
    slot.worker.unref();
    slot.worker.postMessage('quit');
  }

  #finish(slot: Slot, settle: (j: Job) => void): void {
    const job = slot.job;
    if (slot.timer) clearTimeout(slot.timer);
    slot.timer = undefined;
    slot.job = undefined;
    if (!slot.dead && !slot.stopping) slot.worker.unref();
    if (!job) return;
    if (job.onAbort) job.signal?.removeEventListener('abort', job.onAbort);
    settle(job);
  }

  /** Hands queued jobs to idle ready workers, starting workers up to the pool size. */
  #pump(): void {
    if (this.#closed) return;
    const now = Date.now();
    // Waiting is bounded too (starting a worker takes a moment, so at least 30 s).
    const maxWait = Math.max(30_000, 2 * this.#o.timeoutMs);
    for (const job of this.#queue.filter((j) => now - j.queuedAt > maxWait)) {
      this.#queue.splice(this.#queue.indexOf(job), 1);
      if (job.onAbort) job.signal?.removeEventListener('abort', job.onAbort);
      job.reject(new HttpError(503, 'overloaded', `Every prompt worker has been busy for ${Math.round(maxWait / 1000)} s; retry later`));
    }
    while (this.#queue.length > 0) {
      let idle: Slot | undefined;
      let starting = 0;
      for (const s of this.#slots) {
        if (s.dead || s.job || s.stopping) continue;
        if (this.#readySlots.has(s)) {
          idle = s;
          break;
        }
        starting++;
      }
      if (!idle) {
        if (this.#slots.size < this.#o.size && this.#zombies.size < this.#o.size && starting < this.#queue.length) {
          const s = this.#spawn();
          s.ready.then(() => this.#pump(), () => {});
          continue;
        }
        if (this.#queue.length > 0 && !this.#waitTimer) {
          // Re-check later so that waiting jobs time out even when no worker frees up.
          this.#waitTimer = setTimeout(() => {
            this.#waitTimer = undefined;
            this.#pump();
          }, Math.min(1000, this.#o.timeoutMs));
        }
        return;
      }
      const job = this.#queue.shift()!;
      idle.job = job;
      idle.worker.ref();
      const slot = idle;
      slot.timer = setTimeout(() => {
        this.timeouts++;
        this.#stop(slot);
        this.#finish(slot, (j) =>
          j.reject(
            new HttpError(
              413,
              'too_large',
              `Rendering and tokenizing this request took longer than ${this.#o.timeoutMs} ms and was stopped; send less text (text the vocabulary has no tokens for, such as long runs of emoji, is the slowest to tokenize)`,
            ),
          ),
        );
        this.#pump();
      }, this.#o.timeoutMs);
      try {
        slot.worker.postMessage(job.message);
      } catch (e) {
        // Not cloneable (e.g. nested too deeply): the request's fault, the worker is fine.
        this.#finish(slot, (j) => j.reject(new LlamuxError('INVALID_ARGUMENT', `The request cannot be handed to the prompt worker: ${(e as Error).message}`)));
      }
    }
  }


  /**
   * Tells a slot's worker to stop its job (the shared flag stops the tokenizer between pieces);
   * the slot takes new jobs once the worker answers, or is retired after cancelGraceMs.
   */
  #stop(slot: Slot): void {
    const job = slot.job;
    if (!job || slot.dead) return;
    Atomics.store(slot.cancel, 0, 1);
    slot.stopping = {
      id: job.id,
      at: performance.now(),
      timer: setTimeout(() => {
        if (slot.dead) return;
        this.retired++;
        this.#retire(slot);
        this.#pump();
      }, cancelGraceMs),
    };
  }

  /**
   * Renders and tokenizes a conversation in a worker.
   * @throws LlamuxError INVALID_ARGUMENT (the template refused it), ABORTED (signal); HttpError 413 (time cap)
   */
  build(
    messages: ChatMessage[],
    tools: ChatToolDefinition[],
    replay: Record<string, ReplaySpan>,
    signal?: AbortSignal,
    variables?: Record<string, unknown>,
    media?: ReadonlyMap<string, Int32Array>,
    whole?: { turns: Record<number, TurnReplay>; keepReasoning: boolean },
    /** Token positions to locate (prompt-cache breakpoints, prompt-marks.ts). */
    marks?: PromptMarks,
  ): Promise<BuiltPrompt> {
    if (this.#closed) return Promise.reject(new LlamuxError('DISPOSED', 'The server is closing'));
    return new Promise<BuiltPrompt>((resolve, reject) => {
      let size = 0;
      for (const m of messages) size += typeof m.content === 'string' ? m.content.length : 0;
      const job: Job = {
        id: nextJobId++,
        queuedAt: Date.now(),
        size,
        message: {
          id: 0,
          messages,
          tools,
          replay,
          ...(variables ? { variables } : {}),
          ...(media && media.size ? { media: [...media] } : {}),
          ...(whole ? { turns: whole.turns, keepReasoning: whole.keepReasoning } : {}),
          ...(marks?.variants.length ? { marks } : {}),
        },
        resolve,
        reject,
      };
      job.message.id = job.id;
      if (signal) {
        if (signal.aborted) {
          reject(new LlamuxError('ABORTED', 'The request was aborted', { cause: signal.reason }));
          return;
        }
        job.signal = signal;
        job.onAbort = () => {
          const queued = this.#queue.indexOf(job);
          if (queued >= 0) this.#queue.splice(queued, 1);
          else {
            // Running: tell its worker to stop.
            for (const s of [...this.#slots]) {
              if (s.job !== job) continue;
              this.#stop(s);
              if (s.timer) clearTimeout(s.timer);
              s.timer = undefined;
              s.job = undefined;
            }
          }
          reject(new LlamuxError('ABORTED', 'The request was aborted', { cause: signal.reason }));
          this.#pump();
        };
        signal.addEventListener('abort', job.onAbort, { once: true });
      }
      // Small jobs wait only behind small ones: a burst of huge requests delays them by at most
      // the jobs already running.
      const at = size < SMALL_JOB ? this.#queue.findIndex((j) => j.size >= SMALL_JOB) : -1;
      if (at >= 0) this.#queue.splice(at, 0, job);
      else this.#queue.push(job);
      this.#pump();
    });
  }

  /**
   * Stops every worker. Idle ones are terminated; busy and retired ones are told to stop (their
   * tokenizer calls return at the next piece) and leave (waited for up to 3 s, then left to
   * finish unreferenced).
   */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#waitTimer) clearTimeout(this.#waitTimer);
    for (const job of this.#queue.splice(0)) job.reject(new LlamuxError('DISPOSED', 'The server is closing'));
    for (const s of [...this.#slots]) {
      const job = s.job;
      this.#retire(s);
      if (job) {
        s.job = job;
        this.#finish(s, (j) => j.reject(new LlamuxError('DISPOSED', 'The server is closing')));
      }
    }
    // Keep the process alive while they leave: with every handle unreferenced, a caller
    // awaiting close() at the top level would see the process exit under it (exit code 13).
    const zombies = [...this.#zombies];
    const exits = zombies.map((w) => new Promise<void>((resolve) => w.once('exit', () => resolve())));
    for (const w of zombies) w.ref();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(exits), new Promise<void>((resolve) => (timer = setTimeout(resolve, 3_000)))]);
    clearTimeout(timer);
    for (const w of zombies) w.unref();
  }
}
