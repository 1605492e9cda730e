// What the request path needs of a loaded model. The engine (src/engine/: context, session,
// markers, reasoning, prompt tokens, embeddings) and the native request mappers take a
// ModelHandle, never the Model class: src/model/model.ts sits above them and nothing below
// imports it back. Model implements this interface.
import type { NativeModel } from '../native/binding.js';
import type { MediaLimits, ModelCapabilities, ModelMetadata, VocabInfo } from './types.js';

/** A loaded model as the engine sees it: the Model's tokenizer calls (narrowed to the options used) and its native handle. */
export interface ModelHandle {
  readonly vocab: VocabInfo;
  readonly metadata: ModelMetadata;
  /** What the model's projector reads (both false without one). */
  readonly capabilities: ModelCapabilities;
  readonly mediaLimits: MediaLimits;
  /** Any GGUF metadata value by key, as text; undefined when absent. */
  getMetadata(key: string): string | undefined;
  tokenize(text: string, options: { addSpecial: boolean; parseSpecial: boolean }): Int32Array;
  /** Off the JS thread; rejects with ABORTED when `signal` fires. */
  tokenizeAsync(text: string, options: { addSpecial: boolean; parseSpecial: boolean; signal?: AbortSignal }): Promise<Int32Array>;
  detokenize(tokens: ArrayLike<number>, options: { special: boolean }): string;
  tokenPiece(token: number, options: { special: boolean }): Uint8Array;
  isEndOfGeneration(token: number): boolean;
  /** The addon's model object, for `new native.Context(…)`. Throws DISPOSED. */
  nativeHandle(): NativeModel;
}

/**
 * Filled in by src/model/model.ts (`{ model: Model }`), so that `ctx.model` has the Model
 * class's exact type while src/engine/context.ts imports only this file (the registry pattern
 * of vitest's `ProvidedContext`). Without model.ts in the program it is ModelHandle.
 */
export interface ModelTypeRegistry {}

/** The Model class, as registered by src/model/model.ts (ModelHandle until it is). */
export type RegisteredModel = ModelTypeRegistry extends { model: infer M extends ModelHandle } ? M : ModelHandle;
