// ModelPool: several models, loaded on demand by name, at most `maxLoaded` at once (LRU unload of
// idle models), unloaded after `idleUnloadMs`, pinned ones kept. Before a load the fit planner
// (src/model/fit.ts) checks the model against the pool's memory budget less what the loaded
// models hold, and unloads idle models (least recently used first) to make room.
import { EventEmitter } from 'node:events';
import { z } from 'zod';
import type { Context } from '../engine/context.js';
import { LlamuxError, abortError, isLlamuxError } from '../errors.js';
import { systemInfo } from '../native/system-info.js';
import { parseOptions, type ContextOptions, type LoadModelOptions } from '../options.js';
import { loadModel } from './load.js';
import type { Model } from './model.js';
import { footprintOf, hostFits, hostFree, mib, modelSizes, planFit, remaining, type FitDevice, type FitModelSizes, type FitPlan, type Footprint } from './pool-memory.js';
import { resolvePoolSource, type ModelPoolEntry, type ResolvedEntry } from './pool-source.js';

export type { ModelPoolEntry } from './pool-source.js';

/** A model's state in the pool. */
export type PooledModelState = 'unloaded' | 'loading' | 'loaded' | 'unloading';

/** Why the pool unloaded a model. */
export type UnloadReason = 'lru' | 'memory' | 'idle' | 'request' | 'close';

/** A loaded model as the `attach` hook sees it. */
export interface PooledModel {
  readonly name: string;
  readonly model: Model;
  readonly context: Context;
  readonly entry: ResolvedEntry;
}

export interface ModelPoolOptions<T = undefined> {
  /**
   * The models: a folder (each `*.gguf` named by its stem; split files as one model; a
   * subfolder holding one model named by the subfolder), a JSON config file, or a config object
   * (name → `{ path, pinned, loadOptions, contextOptions }`).
   */
  models: string | Record<string, ModelPoolEntry>;
  /** Models loaded at once; the least recently used idle one is unloaded for another (default 4; 0: no limit). */
  maxLoaded?: number;
  /** An unpinned model nobody used for this long is unloaded (default: never). */
  idleUnloadMs?: number;
  /** loadModel options of every model (an entry's own override them). */
  loadOptions?: Omit<LoadModelOptions, 'onProgress' | 'signal'>;
  /** Context options of every model, or of each by name (an entry's own override them). */
  contextOptions?: ContextOptions | ((name: string) => ContextOptions);
  /**
   * The memory the fit planner plans the loaded models in: 'auto' (default) the devices'
   * free memory when the pool is created (systemInfo()), `{ devices }` given figures (the CPU
   * device's memoryFree is the host budget), or false (no memory check).
   */
  memory?: 'auto' | false | { devices: FitDevice[] };
  /** Per-model resources made once a model is loaded (the server's chat service); on every lease. */
  attach?: (loaded: PooledModel) => T | Promise<T>;
  /** Frees what `attach` made, before the model unloads. */
  detach?: (value: T, loaded: PooledModel) => void | Promise<void>;
}

/** A model in use: released (once) when the work is done; an unload waits for it. */
export interface ModelLease<T = undefined> {
  readonly name: string;
  readonly model: Model;
  readonly context: Context;
  /** What the pool's `attach` hook made for this model. */
  readonly attached: T;
  release(): void;
  [Symbol.dispose](): void;
}

/** One model as `pool.status()` lists it. */
export interface PooledModelStatus {
  name: string;
  path: string;
  state: PooledModelState;
  pinned: boolean;
  /** Loading progress 0..1 (1 once loaded, 0 when unloaded). */
  progress: number;
  /** Leases held (requests running on it). */
  leases: number;
  /** When it was last acquired or released (ms since the epoch); undefined before its first use. */
  lastUsedAt?: number;
  /** Why its last load failed (cleared by the next load). */
  error?: { code: string; message: string };
}

export interface ModelPoolEvents {
  loading: [{ name: string }];
  progress: [{ name: string; progress: number }];
  loaded: [{ name: string; ms: number }];
  loadFailed: [{ name: string; error: LlamuxError }];
  unloading: [{ name: string; reason: UnloadReason }];
  unloaded: [{ name: string; reason: UnloadReason }];
}

/** A failed load, with the model's name; `code` is the cause's (MODEL_INVALID for a corrupt file). */
export class ModelLoadError extends LlamuxError {
  readonly model: string;
  constructor(model: string, cause: LlamuxError) {
    super(cause.code, `Model "${model}" failed to load: ${cause.message}`, { cause });
    this.model = model;
  }
}
Object.defineProperty(ModelLoadError.prototype, 'name', { value: 'ModelLoadError', writable: true, configurable: true });

interface Loaded<T> {
  model: Model;
  context: Context;
  attached: T;
}

interface Slot<T> {
  readonly entry: ResolvedEntry;
  state: PooledModelState;
  progress: number;
  loading?: Promise<void>;
  loadAbort?: AbortController;
  unloading?: Promise<void>;
  loaded?: Loaded<T>;
  leases: number;
  /** acquire() calls waiting on this model (it is not evicted under them). */
  pending: number;
  /** Counted against maxLoaded and the memory budget: from admission until fully unloaded. */
  reserved: boolean;
  footprint?: Footprint;
  /** When it was last acquired or released (ms since the epoch; 0: never). */
  lastUsed: number;
  /** The pool's use counter at that moment: the LRU order (several uses fit in one millisecond). */
  lastUse: number;
  idleTimer?: NodeJS.Timeout;
  error?: LlamuxError;
}

const OptionsSchema = z
  .object({
    models: z.union([z.string().min(1), z.record(z.string(), z.unknown())]),
    maxLoaded: z.number().int().min(0).default(4),
    idleUnloadMs: z.number().int().positive().optional(),
    loadOptions: z.record(z.string(), z.unknown()).default({}),
    contextOptions: z.union([z.record(z.string(), z.unknown()), z.custom<(name: string) => ContextOptions>((v) => typeof v === 'function', { message: 'expected an object or a function' })]).default({}),
    memory: z
      .union([
        z.literal('auto'),
        z.literal(false),
        z.object({ devices: z.array(z.object({ name: z.string(), description: z.string().optional(), type: z.enum(['cpu', 'gpu', 'igpu', 'accel']), memoryFree: z.number().min(0), memoryTotal: z.number().min(0) }).strict()).min(1) }).strict(),
      ])
      .default('auto'),
    attach: z.custom<(l: PooledModel) => unknown>((v) => typeof v === 'function', { message: 'expected a function' }).optional(),
    detach: z.custom<(v: unknown, l: PooledModel) => unknown>((v) => typeof v === 'function', { message: 'expected a function' }).optional(),
  })
  .strict();

/** Resolves with `p`, or rejects ABORTED as soon as the signal fires. */
function abortable<V>(p: Promise<V>, signal: AbortSignal | undefined, what: string): Promise<V> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(abortError(signal, what));
  return new Promise<V>((resolve, reject) => {
    const onAbort = (): void => reject(abortError(signal, what));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/**
 * Several models served by name: loaded on the first `acquire()`, shared by every request that
 * arrives while it loads (one load per model), unloaded least recently used first when
 * `maxLoaded` or the memory budget needs room, after `idleUnloadMs` unused, or on `unload()`,
 * which waits for the leases held on it. Each model has its own context (and whatever `attach`
 * makes), so no cache or store is shared between models.
 *
 * @throws LlamuxError INVALID_ARGUMENT (options, a bad config), MODEL_NOT_FOUND (no such folder or config file)
 * @example
 * const pool = new ModelPool({ models: './models', maxLoaded: 2, idleUnloadMs: 300_000 });
 * const lease = await pool.acquire('qwen3-4b');
 * try {
 *   console.log((await lease.context.generate({ prompt: 'Hello' }).result()).text);
 * } finally {
 *   lease.release();
 * }
 */
export class ModelPool<T = undefined> extends EventEmitter<ModelPoolEvents> {
  readonly #slots = new Map<string, Slot<T>>();
  readonly #maxLoaded: number;
  readonly #idleMs: number | undefined;
  readonly #loadOptions: Record<string, unknown>;
  readonly #contextOptions: Record<string, unknown> | ((name: string) => ContextOptions);
  readonly #budget: FitDevice[] | undefined;
  readonly #attach: ((l: PooledModel) => T | Promise<T>) | undefined;
  // `unknown`, not T: a pool of any T is then a ModelPool<unknown> (T only comes out of the pool).
  readonly #detach: ((v: unknown, l: PooledModel) => void | Promise<void>) | undefined;
  /** Admissions run one at a time, so two loads never count the same free memory. */
  #admission: Promise<void> = Promise.resolve();
  /** Wakes whoever waits for a lease to be released or a model to change state. */
  #waiters = new Set<() => void>();
  #closing: Promise<void> | undefined;
  #uses = 0;

  constructor(options: ModelPoolOptions<T>) {
    super();
    const o = parseOptions(OptionsSchema, options, 'ModelPool options');
    this.#maxLoaded = o.maxLoaded;
    this.#idleMs = o.idleUnloadMs;
    this.#loadOptions = o.loadOptions;
    this.#contextOptions = o.contextOptions;
    this.#budget = o.memory === false ? undefined : o.memory === 'auto' ? systemInfo().devices.map((d) => ({ ...d })) : o.memory.devices;
    this.#attach = o.attach as ((l: PooledModel) => T | Promise<T>) | undefined;
    this.#detach = o.detach as ((v: unknown, l: PooledModel) => void | Promise<void>) | undefined;
    for (const entry of resolvePoolSource(options.models)) {
      this.#slots.set(entry.name, { entry, state: 'unloaded', progress: 0, leases: 0, pending: 0, reserved: false, lastUsed: 0, lastUse: 0 });
    }
    const pinned = [...this.#slots.values()].filter((s) => s.entry.pinned).length;
    if (this.#maxLoaded > 0 && pinned > 0 && (pinned > this.#maxLoaded || (pinned === this.#maxLoaded && pinned < this.#slots.size))) {
      throw new LlamuxError('INVALID_ARGUMENT', `${pinned} pinned model${pinned === 1 ? '' : 's'} but maxLoaded is ${this.#maxLoaded}: pinned models never unload, so ${pinned > this.#maxLoaded ? 'they cannot all load' : 'no other model could ever load'}; raise maxLoaded or pin fewer`);
    }
  }

  /** The models' names, in the order of the folder or config. */
  get names(): string[] {
    return [...this.#slots.keys()];
  }

  has(name: string): boolean {
    return this.#slots.has(name);
  }

  /** The pool's models, their state, load progress and leases. */
  status(): PooledModelStatus[] {
    return [...this.#slots.values()].map((s) => ({
      name: s.entry.name,
      path: s.entry.path,
      state: s.state,
      pinned: s.entry.pinned,
      progress: s.progress,
      leases: s.leases,
      ...(s.lastUsed > 0 ? { lastUsedAt: s.lastUsed } : {}),
      ...(s.error ? { error: { code: s.error.code, message: s.error.message } } : {}),
    }));
  }

  #slot(name: string): Slot<T> {
    const s = typeof name === 'string' ? this.#slots.get(name) : undefined;
    if (!s) {
      const names = this.names.map((n) => JSON.stringify(n)).join(', ');
      throw new LlamuxError('MODEL_NOT_FOUND', `The pool has no model ${JSON.stringify(name)}; it has ${names}`);
    }
    return s;
  }

  /**
   * The model named `name`, loaded if needed (requests arriving during its load wait for that
   * same load). Release the lease when done: an unload waits for it.
   * @throws LlamuxError MODEL_NOT_FOUND (unknown name: the message lists the names),
   *   ModelLoadError (the load failed: MODEL_INVALID for a corrupt file, ...; a later acquire
   *   tries again), MODEL_TOO_LARGE (it does not fit the memory budget, even with every idle
   *   model unloaded), ABORTED (signal), DISPOSED (the pool is closed)
   */
  async acquire(name: string, options: { signal?: AbortSignal } = {}): Promise<ModelLease<T>> {
    const slot = this.#slot(name);
    const { signal } = options;
    const what = `Acquiring the model "${name}"`;
    if (signal?.aborted) throw abortError(signal, what);
    slot.pending++;
    try {
      for (;;) {
        if (this.#closing) throw new LlamuxError('DISPOSED', 'The model pool is closed');
        if (slot.state === 'loaded') return this.#lease(slot);
        if (slot.state === 'unloaded') slot.loading = this.#load(slot);
        // (A 'loading' listener that acquires runs before `slot.loading` is set: it waits a tick.)
        await abortable((slot.state === 'loading' ? slot.loading : slot.unloading) ?? Promise.resolve(), signal, what);
      }
    } catch (e) {
      if (this.#closing && !(isLlamuxError(e, 'ABORTED') && signal?.aborted)) throw new LlamuxError('DISPOSED', 'The model pool is closed', { cause: e });
      throw e;
    } finally {
      slot.pending--;
      this.#idleCheck(slot);
    }
  }

  /**
   * Loads a model (if it is not loaded) without holding it.
   * @throws as acquire()
   */
  async load(name: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    (await this.acquire(name, options)).release();
  }

  /**
   * Unloads a model (pinned ones too), once the leases held on it are released; requests that
   * arrive meanwhile wait and load it again. Resolves false when it was not loaded.
   * @throws LlamuxError MODEL_NOT_FOUND (unknown name)
   */
  async unload(name: string): Promise<boolean> {
    const slot = this.#slot(name);
    if (slot.state === 'loading') await slot.loading!.catch(() => {});
    if (slot.state === 'unloading') {
      await slot.unloading;
      return true;
    }
    if (slot.state !== 'loaded') return false;
    await this.#unload(slot, 'request');
    return true;
  }

  /**
   * Unloads every model at once and refuses new acquires: generations still running on a lease
   * end with DISPOSED (as when their context is disposed). Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      for (const s of this.#slots.values()) {
        clearTimeout(s.idleTimer);
        s.loadAbort?.abort(new LlamuxError('DISPOSED', 'The model pool is closed'));
      }
      this.#notify();
      await Promise.all([...this.#slots.values()].map((s) => s.loading?.catch(() => {})));
      await Promise.all(
        [...this.#slots.values()].map((s) => (s.state === 'unloading' ? s.unloading : s.state === 'loaded' ? this.#unload(s, 'close') : undefined)),
      );
    })();
    return this.#closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #lease(slot: Slot<T>): ModelLease<T> {
    const loaded = slot.loaded!;
    slot.leases++;
    this.#touch(slot);
    clearTimeout(slot.idleTimer);
    let released = false;
    const live = <V>(v: V): V => {
      if (released) throw new LlamuxError('DISPOSED', `This lease of "${slot.entry.name}" was released`);
      return v;
    };
    const release = (): void => {
      if (released) return;
      released = true;
      slot.leases--;
      this.#touch(slot);
      this.#notify();
      this.#idleCheck(slot);
    };
    return {
      name: slot.entry.name,
      get model() {
        return live(loaded.model);
      },
      get context() {
        return live(loaded.context);
      },
      get attached() {
        return live(loaded.attached);
      },
      release,
      [Symbol.dispose]: release,
    };
  }

  #contextOptionsOf(slot: Slot<T>): ContextOptions {
    const base = typeof this.#contextOptions === 'function' ? this.#contextOptions(slot.entry.name) : this.#contextOptions;
    return { ...base, ...slot.entry.contextOptions } as ContextOptions;
  }

  #touch(slot: Slot<T>): void {
    slot.lastUsed = Date.now();
    slot.lastUse = ++this.#uses;
  }

  /** Starts the idle timer of a loaded, unused, unpinned model. */
  #idleCheck(slot: Slot<T>): void {
    if (this.#idleMs === undefined || slot.entry.pinned || slot.state !== 'loaded' || slot.leases > 0 || slot.pending > 0 || this.#closing) return;
    clearTimeout(slot.idleTimer);
    slot.idleTimer = setTimeout(() => {
      if (slot.state === 'loaded' && slot.leases === 0 && slot.pending === 0 && !this.#closing) void this.#unload(slot, 'idle');
    }, this.#idleMs);
    slot.idleTimer.unref();
  }

  #notify(): void {
    const ws = [...this.#waiters];
    this.#waiters.clear();
    for (const w of ws) w();
  }

  /** Resolves at the next release or state change. */
  #nextChange(signal?: AbortSignal): Promise<void> {
    return abortable(new Promise<void>((resolve) => this.#waiters.add(resolve)), signal, 'Waiting for room in the model pool');
  }

  #setState(slot: Slot<T>, state: PooledModelState): void {
    slot.state = state;
    this.#notify();
  }

  async #load(slot: Slot<T>): Promise<void> {
    const name = slot.entry.name;
    slot.error = undefined;
    slot.progress = 0;
    this.#setState(slot, 'loading');
    this.emit('loading', { name });
    const ac = new AbortController();
    slot.loadAbort = ac;
    const started = performance.now();
    let model: Model | undefined;
    let context: Context | undefined;
    try {
      await this.#admit(slot, ac.signal);
      const loadOptions = { ...this.#loadOptions, ...slot.entry.loadOptions } as LoadModelOptions;
      const contextOptions = this.#contextOptionsOf(slot);
      model = await loadModel(slot.entry.path, {
        ...loadOptions,
        // gpuLayers 'auto' plans for the context this pool creates.
        fit: { contextSize: contextOptions.contextSize ?? 4096, sequences: contextOptions.sequences ?? 1, ...loadOptions.fit },
        signal: ac.signal,
        onProgress: (p) => {
          slot.progress = p;
          this.emit('progress', { name, progress: p });
        },
      });
      // gpuLayers 'auto' may have planned a smaller context to keep every layer on the GPU.
      const planned = model.fit?.contextSize;
      context = await model.createContext(
        planned !== undefined && contextOptions.contextSize !== undefined && planned < contextOptions.contextSize ? { ...contextOptions, contextSize: planned } : contextOptions,
      );
      const attached = this.#attach ? await this.#attach({ name, model, context, entry: slot.entry }) : (undefined as T);
      if (ac.signal.aborted) throw ac.signal.reason;
      slot.loaded = { model, context, attached };
      slot.progress = 1;
      this.#touch(slot);
      this.#setState(slot, 'loaded');
      this.emit('loaded', { name, ms: performance.now() - started });
      // Every acquire that waited may have given up (aborted): the idle clock starts now.
      this.#idleCheck(slot);
    } catch (e) {
      await context?.dispose().catch(() => {});
      await model?.dispose().catch(() => {});
      slot.reserved = false;
      slot.footprint = undefined;
      slot.progress = 0;
      const cause = isLlamuxError(e) ? e : new LlamuxError('INTERNAL', e instanceof Error ? e.message : String(e), { cause: e });
      // The pool's own refusals keep their code and words; a load that failed names the model.
      const err = cause.code === 'MODEL_TOO_LARGE' || cause.code === 'DISPOSED' || ac.signal.aborted ? cause : new ModelLoadError(name, cause);
      if (!ac.signal.aborted) slot.error = err;
      this.#setState(slot, 'unloaded');
      this.emit('loadFailed', { name, error: err });
      throw err;
    } finally {
      slot.loading = undefined;
      slot.loadAbort = undefined;
    }
  }

  #admit(slot: Slot<T>, signal: AbortSignal): Promise<void> {
    const run = this.#admission.then(() => this.#admitNow(slot, signal));
    this.#admission = run.catch(() => {});
    return run;
  }

  /** Makes room for a model (unloading idle ones, LRU first) and reserves its place and memory. */
  async #admitNow(slot: Slot<T>, signal: AbortSignal): Promise<void> {
    const budget = this.#budget;
    const sizes = budget ? await modelSizes(slot.entry.files) : undefined;
    const contextOptions = this.#contextOptionsOf(slot);
    const request = { contextSize: contextOptions.contextSize ?? 4096, sequences: contextOptions.sequences ?? 1 };
    const alone = budget && sizes ? planFit(sizes, budget, request) : undefined;
    if (alone && budget && !hostFits(alone, budget)) {
      throw new LlamuxError(
        'MODEL_TOO_LARGE',
        `The model "${slot.entry.name}" needs about ${mib(alone.hostBytes)} of host memory${alone.gpuLayers > 0 ? ` beside ${alone.gpuLayers} layers on the GPU` : ''} with a ${alone.contextSize}-token context, more than the pool's budget of ${mib(hostFree(budget)!)} with no other model loaded`,
      );
    }
    for (;;) {
      if (signal.aborted) throw signal.reason;
      const others = [...this.#slots.values()].filter((s) => s !== slot && s.reserved);
      const countOk = this.#maxLoaded === 0 || others.length < this.#maxLoaded;
      const fit = alone && budget && sizes ? this.#fitNow(sizes, budget, others, request, alone) : undefined;
      const memOk = fit === undefined || fit.fits;
      const victim = others
        .filter((s) => s.state === 'loaded' && s.leases === 0 && s.pending === 0 && !s.entry.pinned)
        .sort((a, b) => a.lastUse - b.lastUse)[0];
      // Room enough, and not a worse GPU placement than an unload would give: reserve it.
      if (countOk && memOk && !(fit?.worse && victim)) {
        slot.reserved = true;
        if (fit) slot.footprint = fit.footprint;
        return;
      }
      if (victim) {
        await this.#unload(victim, countOk ? 'memory' : 'lru');
        continue;
      }
      // Nothing idle to unload: wait for a running model to be released, unless only pinned
      // models hold the room (they never unload).
      if (!others.some((s) => !s.entry.pinned)) {
        if (!countOk) throw new LlamuxError('MODEL_TOO_LARGE', `The pool's ${this.#maxLoaded} model slots are held by pinned models`);
        throw new LlamuxError(
          'MODEL_TOO_LARGE',
          `The model "${slot.entry.name}" needs about ${mib(fit!.plan.hostBytes)} of host memory with a ${fit!.plan.contextSize}-token context; the pinned models (${others.map((s) => s.entry.name).join(', ')}) leave about ${mib(hostFree(fit!.devices) ?? 0)} of the pool's budget`,
        );
      }
      await this.#nextChange(signal);
    }
  }

  #fitNow(sizes: FitModelSizes, budget: FitDevice[], others: Slot<T>[], request: { contextSize: number; sequences: number }, alone: FitPlan) {
    const devices = remaining(budget, others.flatMap((s) => s.footprint ?? []));
    const plan = planFit(sizes, devices, request);
    return { plan, devices, fits: hostFits(plan, devices), worse: plan.gpuLayers < alone.gpuLayers, footprint: footprintOf(plan, budget) };
  }

  /** Unloads a model once its leases are released (at once when the pool closes). */
  #unload(slot: Slot<T>, reason: UnloadReason): Promise<void> {
    clearTimeout(slot.idleTimer);
    this.#setState(slot, 'unloading');
    const name = slot.entry.name;
    this.emit('unloading', { name, reason });
    slot.unloading = (async () => {
      while (slot.leases > 0 && !this.#closing) await this.#nextChange();
      const loaded = slot.loaded!;
      try {
        await this.#detach?.(loaded.attached, { name, model: loaded.model, context: loaded.context, entry: slot.entry });
      } finally {
        slot.loaded = undefined;
        await loaded.context.dispose().catch(() => {});
        await loaded.model.dispose().catch(() => {});
        slot.reserved = false;
        slot.footprint = undefined;
        slot.progress = 0;
        slot.unloading = undefined;
        this.#setState(slot, 'unloaded');
        this.emit('unloaded', { name, reason });
      }
    })();
    return slot.unloading;
  }
}
