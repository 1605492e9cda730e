import type { NativeMetadata, NativeModel, NativeVocabInfo } from '../native/binding.js';
import type { Context } from '../engine/context.js';
import type { ParsedContextOptions } from '../native/request.js';
import { LlamuxError, abortError, fromNative } from '../errors.js';
import type { FitPlan } from './fit.js';
import { Adapter } from './adapter.js';
import { resolve as resolvePath } from 'node:path';
import type { ModelHandle } from './handle.js';
import type { MediaLimits, ModelCapabilities, ModelMetadata, TokenInfo, VocabInfo, WeightPlacement } from './types.js';
import { toInt32Array } from '../engine/tokens.js';
import type { MarkerOption } from '../engine/markers.js';
import {
  ContextOptionsSchema,
  DetokenizeOptionsSchema,
  TokenizeOptionsSchema,
  parseOptions,
  type ContextOptions,
  type DetokenizeOptions,
  type TokenizeAsyncOptions,
  type TokenizeOptions,
} from '../options.js';

export { TokenAttribute } from './types.js';
export type { MediaLimits, ModelCapabilities, ModelMetadata, TokenInfo, VocabInfo, WeightPlacement } from './types.js';

/** `model.projector`: the multimodal projector file and how its media are placed. */
export interface ProjectorReport {
  readonly path: string;
  /** Identifies the projector's weights; part of every media id (and so of every cache key). */
  readonly fingerprint: string;
  /** The text model takes M-RoPE positions (Qwen-VL style). */
  readonly mrope: boolean;
  /** Media embeddings are decoded with non-causal attention (Gemma 3). */
  readonly nonCausal: boolean;
  /** Audio sample rate the projector expects (-1 without audio). */
  readonly audioSampleRate: number;
}

const NO_MEDIA: ModelCapabilities = Object.freeze({ vision: false, audio: false });
/** The default media bounds: 16 megapixels, 16 media, 32 MiB each, 5 minutes of audio. */
export const DEFAULT_MEDIA_LIMITS: MediaLimits = Object.freeze({ maxPixels: 16_777_216, maxPerPrompt: 16, maxBytes: 32 * 1024 * 1024, maxAudioSeconds: 300 });

declare module './handle.js' {
  /** `ctx.model` is this class (src/model/handle.ts, RegisteredModel). */
  interface ModelTypeRegistry {
    model: Model;
  }
}

/**
 * @internal How a Model makes its contexts: src/engine/context.ts's `Context.create`, handed in
 * by loadModel (src/model/load.ts), so this file needs the Context class only as a type.
 */
export type ContextFactory = (model: Model, options: ParsedContextOptions) => Promise<Context>;

const kNative = Symbol('llamux.native');

/**
 * A loaded GGUF model. Create with {@link loadModel}; free with {@link Model.dispose}.
 * Tokenizer calls are synchronous and bounded (tokenizeAsync, or tokenize with a signal, runs
 * them off the JS thread); anything that reads files or decodes runs on a native thread.
 */
export class Model implements ModelHandle {
  readonly path: string;
  readonly vocabOnly: boolean;
  /** @internal default tool-call markers for this model's contexts */
  defaultMarkers: MarkerOption | undefined;
  /**
   * The plan `gpuLayers: 'auto'` loaded with: layers per GPU, the context size it reserved
   * memory for, and why. Undefined with an explicit gpuLayers, rpcServers or vocabOnly.
   */
  fit: FitPlan | undefined;
  /** What prompts may hold besides text: images (`vision`) and audio, as the model's projector
   * (loadModel `{ projector }`) reads them. Both false without a projector. */
  capabilities: ModelCapabilities = NO_MEDIA;
  /** Bounds on the media of one prompt (loadModel `mediaLimits`, with defaults). */
  mediaLimits: MediaLimits = DEFAULT_MEDIA_LIMITS;
  /** The projector loaded beside the model: its file and what libmtmd says of it; undefined without. */
  projector: ProjectorReport | undefined;
  #native: NativeModel | undefined;
  // Weak: an undisposed context that nobody references is collected (its engine stops).
  #contexts = new Set<WeakRef<Context>>();
  #collected = new FinalizationRegistry<WeakRef<Context>>((ref) => this.#contexts.delete(ref));
  #vocab: VocabInfo | undefined;
  #metadata: ModelMetadata | undefined;
  #eog: Set<number> | undefined;
  #cancel: Int32Array | undefined;
  #newContext: ContextFactory;

  /** @internal use loadModel() */
  constructor(token: symbol, nativeModel: NativeModel, path: string, vocabOnly: boolean, newContext: ContextFactory) {
    if (token !== kNative) throw new TypeError('Model cannot be constructed directly; use loadModel()');
    this.#native = nativeModel;
    this.#newContext = newContext;
    this.path = path;
    this.vocabOnly = vocabOnly;
  }

  get disposed(): boolean {
    return this.#native === undefined;
  }

  #n(): NativeModel {
    if (!this.#native) throw new LlamuxError('DISPOSED', 'The model has been disposed');
    return this.#native;
  }

  /** @internal */
  nativeHandle(): NativeModel {
    return this.#n();
  }

  /**
   * Text to token ids. `parseSpecial` turns special-token text into control tokens: never enable
   * it for untrusted text. The work is bounded: the text is tokenized in pieces of a few KiB cut
   * where no token can span (the same tokens as one llama_tokenize call), so no input hits
   * llama.cpp's quadratic paths. `maxTokens` stops it early (CONTEXT_OVERFLOW) once the text
   * passes that many tokens. With a `signal` it runs off the JS thread and returns a Promise
   * (as {@link Model.tokenizeAsync}), rejecting with ABORTED within 100 ms of the abort.
   */
  tokenize(text: string, options?: TokenizeOptions): Int32Array;
  tokenize(text: string, options: TokenizeOptions & { signal: AbortSignal }): Promise<Int32Array>;
  tokenize(text: string, options?: TokenizeAsyncOptions): Int32Array | Promise<Int32Array> {
    if (options?.signal !== undefined) return this.tokenizeAsync(text, options);
    const n = this.#n();
    if (typeof text !== 'string') throw new LlamuxError('INVALID_ARGUMENT', `Expected text to be a string but received ${typeof text}`);
    const o = parseOptions(TokenizeOptionsSchema, options, 'tokenize options');
    try {
      return n.tokenize(text, o.addSpecial, o.parseSpecial, this.#cancel, o.maxTokens);
    } catch (e) {
      throw fromNative(e);
    }
  }

  /**
   * {@link Model.tokenize} on a libuv thread: the JS thread stays free, and `signal` stops the
   * native work between pieces; the promise rejects with ABORTED (name AbortError) at once.
   * @throws LlamuxError INVALID_ARGUMENT, DISPOSED, ABORTED
   */
  async tokenizeAsync(text: string, options?: TokenizeAsyncOptions): Promise<Int32Array> {
    const n = this.#n();
    if (typeof text !== 'string') throw new LlamuxError('INVALID_ARGUMENT', `Expected text to be a string but received ${typeof text}`);
    const o = parseOptions(TokenizeOptionsSchema, options, 'tokenize options');
    const signal = o.signal;
    if (signal?.aborted) throw abortError(signal, 'Tokenization');
    const cancel = new Int32Array(new SharedArrayBuffer(4));
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      if (!signal) return;
      onAbort = () => {
        Atomics.store(cancel, 0, 1);
        reject(abortError(signal, 'Tokenization'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
    });
    aborted.catch(() => {});
    try {
      const work = n.tokenizeAsync(text, o.addSpecial, o.parseSpecial, cancel, o.maxTokens);
      work.catch(() => {});
      return await (signal ? Promise.race([work, aborted]) : work);
    } catch (e) {
      if (e instanceof LlamuxError) throw e;
      const err = fromNative(e);
      if (err.code === 'ABORTED') throw abortError(signal, 'Tokenization');
      throw err;
    } finally {
      if (onAbort) signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * @internal A flag (shared with another thread) that stops every synchronous tokenize call of
   * this model while it is non-zero (ABORTED). The server's prompt workers use it for their time cap.
   */
  setTokenizeCancelFlag(flag: Int32Array | undefined): void {
    this.#cancel = flag;
  }

  /**
   * Loads a LoRA adapter (a GGUF with `general.type` "adapter", as llama.cpp's
   * convert_lora_to_gguf.py writes) for this model's contexts: pass it in a request's `adapters`
   * (`[{ adapter, scale }]`) or a context's default `adapters`. It stays loaded until the model is
   * freed (after dispose(), when its last context closes).
   * @throws LlamuxError MODEL_NOT_FOUND (no such file), MODEL_INVALID (not a LoRA adapter, or one
   *   for another architecture or other tensor shapes, e.g. another vocabulary; a corrupt file),
   *   UNSUPPORTED (an aLoRA; a model on RPC servers or loaded vocabOnly), DISPOSED
   */
  async loadAdapter(path: string): Promise<Adapter> {
    const n = this.#n();
    if (typeof path !== 'string' || path === '') throw new LlamuxError('INVALID_ARGUMENT', 'Expected the adapter path to be a non-empty string');
    try {
      return new Adapter(this, await n.loadAdapter(resolvePath(path)));
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** Token ids to text. `special` renders control tokens (e.g. "<s>") into the text. */
  detokenize(tokens: ArrayLike<number>, options?: DetokenizeOptions): string {
    const n = this.#n();
    const o = parseOptions(DetokenizeOptionsSchema, options, 'detokenize options');
    try {
      return n.detokenize(toInt32Array(tokens), o.special);
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** The raw bytes one token contributes to the text (may be part of a UTF-8 character). */
  tokenPiece(token: number, options?: DetokenizeOptions): Uint8Array {
    const n = this.#n();
    const o = parseOptions(DetokenizeOptionsSchema, options, 'tokenPiece options');
    checkTokenId(token);
    try {
      return n.tokenPiece(token, o.special);
    } catch (e) {
      throw fromNative(e);
    }
  }

  tokenInfo(token: number): TokenInfo {
    const n = this.#n();
    checkTokenId(token);
    try {
      return n.tokenInfo(token);
    } catch (e) {
      throw fromNative(e);
    }
  }

  isEndOfGeneration(token: number): boolean {
    if (!this.#eog) this.#eog = new Set(this.vocab.eogTokens);
    return this.#eog.has(token);
  }

  get vocab(): VocabInfo {
    const n = this.#n();
    if (!this.#vocab) {
      const v: NativeVocabInfo = n.vocabInfo();
      this.#vocab = Object.freeze({ ...v, eogTokens: Object.freeze(Array.from(v.eogTokens)), fim: Object.freeze({ ...v.fim }) });
    }
    return this.#vocab;
  }

  get metadata(): ModelMetadata {
    const n = this.#n();
    if (!this.#metadata) {
      const m: NativeMetadata = n.metadata();
      this.#metadata = Object.freeze({
        architecture: m.gguf['general.architecture'] ?? 'unknown',
        name: m.gguf['general.name'],
        description: m.description,
        trainingContextSize: m.nCtxTrain,
        embeddingSize: m.nEmbd,
        layers: m.nLayer,
        heads: m.nHead,
        kvHeads: m.nHeadKv,
        slidingWindow: m.nSwa,
        parameters: m.nParams,
        sizeBytes: m.sizeBytes,
        isRecurrent: m.isRecurrent,
        isHybrid: m.isHybrid,
        hasEncoder: m.hasEncoder,
        mtpLayers: m.mtpLayers,
        mtpLoaded: m.mtpLoaded,
        chatTemplate: m.chatTemplate,
        fingerprint: m.fingerprint,
        gguf: Object.freeze({ ...m.gguf }),
      });
    }
    return this.#metadata;
  }

  /**
   * The RPC servers this model's layers live on (`rpcServers` of loadModel), or undefined
   * for a local model. `failed` is set once one of them died: its contexts failed their
   * requests with RPC_UNAVAILABLE and new contexts are refused; load the model again.
   */
  get rpc(): { servers: readonly string[]; failed?: string } | undefined {
    const s = this.#n().rpcState();
    if (!s) return undefined;
    return { servers: s.servers, ...(s.dead ? { failed: s.message } : {}) };
  }

  /**
   * Where llama.cpp placed each weight tensor, and the bytes per place: what gpuLayers,
   * tensorSplit and cpuMoe/nCpuMoe did (with cpuMoe the experts of offloaded layers read "CPU").
   * @throws LlamuxError DISPOSED
   */
  placement(): WeightPlacement {
    const { tensors } = this.#n().placement();
    const devices: Record<string, number> = {};
    for (const t of tensors) devices[t.device] = (devices[t.device] ?? 0) + t.bytes;
    return { devices, tensors };
  }

  /** Any GGUF metadata value by key, as text; undefined when absent. */
  getMetadata(key: string): string | undefined {
    return this.metadata.gguf[key];
  }

  /**
   * Creates a context: its own KV cache and one native thread that runs every decode.
   * Resolves once llama.cpp has allocated it.
   * @throws LlamuxError INVALID_ARGUMENT, DISPOSED, CONTEXT_CREATE_FAILED, UNSUPPORTED (vocab-only model),
   *   RPC_UNAVAILABLE (an RPC server of the model died)
   */
  async createContext(options?: ContextOptions): Promise<Context> {
    const failed = this.#n().rpcState();
    if (failed?.dead) throw new LlamuxError('RPC_UNAVAILABLE', `The model's RPC server failed: ${failed.message}`);
    if (this.vocabOnly) throw new LlamuxError('UNSUPPORTED', 'This model was loaded with vocabOnly: it has no weights to run a context on');
    const o = parseOptions(ContextOptionsSchema, options, 'context options');
    // gpuLayers 'auto' reserved GPU memory for a context of this size.
    if (this.fit && options?.contextSize === undefined) o.contextSize = this.fit.contextSize;
    if (o.speculative?.mode === 'mtp' && !o.unifiedKv) {
      throw new LlamuxError('INVALID_ARGUMENT', "speculative mode 'mtp' needs unifiedKv: true (the trunk's hidden rows are read in batch order)");
    }
    if (o.speculative && o.speculative.mode === 'mtp' && !this.metadata.mtpLoaded) {
      throw new LlamuxError(
        'INVALID_ARGUMENT',
        this.metadata.mtpLayers > 0
          ? "speculative mode 'mtp' needs the model's multi-token-prediction blocks: load it with loadModel(path, { mtp: true })"
          : `speculative mode 'mtp': this model (${this.metadata.architecture}) has no multi-token-prediction blocks`,
      );
    }
    o.toolCallMarkers ??= this.defaultMarkers;
    const ctx = await this.#newContext(this, o);
    const ref = new WeakRef(ctx);
    this.#contexts.add(ref);
    this.#collected.register(ctx, ref, ref);
    ctx.onDispose(() => {
      this.#contexts.delete(ref);
      this.#collected.unregister(ref);
    });
    return ctx;
  }

  /** Disposes every context of this model, then frees the weights. Idempotent. */
  async dispose(): Promise<void> {
    if (!this.#native) return;
    const contexts = [...this.#contexts].flatMap((r) => r.deref() ?? []);
    await Promise.all(contexts.map((c) => c.dispose()));
    this.#native?.dispose();
    this.#native = undefined;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }
}

function checkTokenId(token: number): void {
  if (!Number.isInteger(token) || token < 0) {
    throw new LlamuxError('INVALID_ARGUMENT', `Expected a token id (a non-negative integer) but received ${String(token)}`);
  }
}

/** @internal Wraps a loaded native model (loadModel, src/model/load.ts). */
export function wrapModel(nativeModel: NativeModel, path: string, vocabOnly: boolean, newContext: ContextFactory): Model {
  return new Model(kNative, nativeModel, path, vocabOnly, newContext);
}

export { toInt32Array };
