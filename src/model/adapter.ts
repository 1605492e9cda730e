// LoRA adapters: what `model.loadAdapter(path)` returns, and the adapter set of a request
// (`adapters: [{ adapter, scale }]`). The native side owns the weights (freed with the model);
// an Adapter is a handle naming them by id. The set's key, its fingerprints and exact scales,
// joins the cache keys of prefillOnly() (src/engine/prefix-keys.ts); natively the same set
// scopes every KV reuse (native/model/adapter.h).
import { LlamuxError } from '../errors.js';

/** A LoRA adapter loaded on a model ({@link Model.loadAdapter}); usable by that model's contexts until it is disposed. */
export class Adapter {
  /** The native id (unique in the process). */
  readonly id: number;
  /** The file it was loaded from. */
  readonly path: string;
  /** Identifies the adapter's weights (file samples and metadata); part of cache keys. */
  readonly fingerprint: string;
  /** The adapter GGUF's scalar metadata (e.g. `adapter.lora.alpha`), as strings. */
  readonly metadata: Readonly<Record<string, string>>;
  readonly #model: object;

  /** @internal Model.loadAdapter creates adapters. */
  constructor(model: object, loaded: { id: number; path: string; fingerprint: string; metadata: Record<string, string> }) {
    this.#model = model;
    this.id = loaded.id;
    this.path = loaded.path;
    this.fingerprint = loaded.fingerprint;
    this.metadata = Object.freeze({ ...loaded.metadata });
  }

  /** @internal Whether `model` loaded this adapter. */
  belongsTo(model: object): boolean {
    return this.#model === model;
  }
}

/** One adapter of a request's set, with its scale (1: as trained; 0: off). */
export interface AdapterUse {
  readonly adapter: Adapter;
  readonly scale: number;
}

/**
 * The set a request decodes with: its own (`[]`: the base model) or the context's default.
 * @throws LlamuxError INVALID_ARGUMENT for an adapter another model loaded
 */
export function resolveAdapters(requested: readonly AdapterUse[] | undefined, contextDefault: readonly AdapterUse[], model: object): readonly AdapterUse[] {
  const set = requested ?? contextDefault;
  for (const u of set) {
    if (!u.adapter.belongsTo(model)) {
      throw new LlamuxError('INVALID_ARGUMENT', `LoRA adapter "${u.adapter.path}" was loaded by another model: load it with this context's model`);
    }
  }
  return set;
}

/** The native request's adapter keys. */
export function adapterFields(set: readonly AdapterUse[] | undefined): { adapterIds: Int32Array; adapterScales: Float32Array } {
  const s = set ?? [];
  return { adapterIds: Int32Array.from(s.map((u) => u.adapter.id)), adapterScales: Float32Array.from(s.map((u) => u.scale)) };
}

/**
 * The set's cache identity: '' for the base model (no adapter, or every scale 0: llama.cpp then
 * computes the base model), else its fingerprints with their float32 scales, sorted.
 */
export function adapterKey(set: readonly AdapterUse[] | undefined): string {
  const parts = (set ?? [])
    .filter((u) => Math.fround(u.scale) !== 0)
    .map((u) => `${u.adapter.fingerprint}@${Math.fround(u.scale)}`)
    .sort();
  return parts.join(',');
}
