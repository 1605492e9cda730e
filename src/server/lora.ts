// The server's LoRA adapters, as llama-server serves them: loaded at start (--lora PATH,
// --lora-scaled PATH SCALE), listed by GET /lora-adapters ([{ id, path, scale }], id = the
// position on the command line), their default scales changed by POST /lora-adapters, and per
// request the `lora` field ([{ id, scale }]; an adapter it does not list runs at scale 0).
// Requests without `lora` use every adapter at its default scale.
import { z } from 'zod';
import type { Adapter, AdapterUse } from '../model/adapter.js';
import type { Model } from '../model/model.js';
import { HttpError } from './http.js';

/** The `lora` field of a request body, and the body of POST /lora-adapters. */
export const LoraField = z
  .array(z.object({ id: z.number().int().min(0), scale: z.number().finite().min(-1000).max(1000) }).strict())
  .max(64);
export type LoraList = z.output<typeof LoraField>;

/** An adapter to load at start: its file and default scale (1 unless given). */
export const ServerLoraSchema = z.union([z.string().min(1), z.object({ path: z.string().min(1), scale: z.number().finite().min(-1000).max(1000).default(1) }).strict()]);
export type ServerLora = z.input<typeof ServerLoraSchema>;

export class ServerAdapters {
  readonly #entries: Array<{ adapter: Adapter; scale: number }>;

  private constructor(entries: Array<{ adapter: Adapter; scale: number }>) {
    this.#entries = entries;
  }

  static none(): ServerAdapters {
    return new ServerAdapters([]);
  }

  /** Loads the adapters in order (ids 0, 1, ...). @throws LlamuxError from model.loadAdapter */
  static async load(model: Model, list: readonly z.output<typeof ServerLoraSchema>[]): Promise<ServerAdapters> {
    const entries: Array<{ adapter: Adapter; scale: number }> = [];
    for (const l of list) {
      const spec = typeof l === 'string' ? { path: l, scale: 1 } : l;
      entries.push({ adapter: await model.loadAdapter(spec.path), scale: spec.scale });
    }
    return new ServerAdapters(entries);
  }

  /** GET /lora-adapters. */
  list(): Array<{ id: number; path: string; scale: number }> {
    return this.#entries.map((e, id) => ({ id, path: e.adapter.path, scale: e.scale }));
  }

  /** POST /lora-adapters: new default scales (adapters it does not list keep theirs). */
  setScales(list: LoraList): void {
    this.#check(list, 'lora adapters');
    for (const l of list) this.#entries[l.id]!.scale = l.scale;
  }

  /** The generate options of a request's `lora` field (nothing when the server has no adapters and the field is absent). */
  options(lora: LoraList | undefined): { adapters?: AdapterUse[] } {
    if (lora === undefined) return this.#entries.length ? { adapters: this.#entries.map((e) => ({ adapter: e.adapter, scale: e.scale })) } : {};
    this.#check(lora, 'lora');
    return { adapters: lora.map((l) => ({ adapter: this.#entries[l.id]!.adapter, scale: l.scale })) };
  }

  #check(list: LoraList, param: string): void {
    const seen = new Set<number>();
    for (const l of list) {
      if (l.id >= this.#entries.length) {
        throw new HttpError(400, 'invalid_request', `lora adapter id ${l.id} is unknown: this server has ${this.#entries.length} (GET /lora-adapters lists them)`, param);
      }
      if (seen.has(l.id)) throw new HttpError(400, 'invalid_request', `lora adapter id ${l.id} is listed twice`, param);
      seen.add(l.id);
    }
  }
}
