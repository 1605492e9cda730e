// Row, byte and age bounds of the server's stores (tool calls and turns, stored responses): the
// same policy on SQLite and in memory, oldest rows dropped first, so each store only says what a
// row is and how many bytes it weighs.
import type { Database as SqliteDatabase } from 'better-sqlite3';

export interface RowBounds {
  maxRows: number;
  maxBytes: number;
  maxAgeMs: number;
}

/**
 * The bounds of one SQLite table that has `id`, `bytes` and `created_at` columns. Counts are kept
 * in memory (recounted when a row is replaced or removed by age); age pruning runs at most once a
 * minute; size pruning deletes the oldest rows in batches, in one transaction.
 */
export class BoundedTable {
  rows = 0;
  bytes = 0;
  #lastAgePrune = 0;
  readonly #db: SqliteDatabase;
  readonly #table: string;
  readonly #bounds: RowBounds;

  /** `table` is a constant of the caller, never client input. Prunes what the file holds beyond the bounds. */
  constructor(db: SqliteDatabase, table: string, bounds: RowBounds) {
    this.#db = db;
    this.#table = table;
    this.#bounds = bounds;
    this.#pruneAge(Date.now());
    this.recount();
    this.#pruneSize();
  }

  /** The oldest `created_at` still valid now. */
  cutoff(): number {
    return Date.now() - this.#bounds.maxAgeMs;
  }

  recount(): void {
    const r = this.#db.prepare(`SELECT COUNT(*) AS n, COALESCE(SUM(bytes), 0) AS b FROM ${this.#table}`).get() as { n: number; b: number };
    this.rows = r.n;
    this.bytes = r.b;
  }

  /** After an insert of `bytes` (`replaced`: the id was there before): counts, then the bounds. */
  added(bytes: number, replaced: boolean): void {
    if (replaced) this.recount();
    else {
      this.rows++;
      this.bytes += bytes;
    }
    const now = Date.now();
    if (now - this.#lastAgePrune > 60_000) this.#pruneAge(now);
    this.#pruneSize();
  }

  /** After the caller deleted a row of `bytes`. */
  removed(bytes: number): void {
    this.rows--;
    this.bytes -= bytes;
  }

  #pruneAge(now: number): void {
    this.#lastAgePrune = now;
    const r = this.#db.prepare(`DELETE FROM ${this.#table} WHERE created_at < ?`).run(now - this.#bounds.maxAgeMs);
    if (r.changes > 0) this.recount();
  }

  #over(): boolean {
    return this.rows > this.#bounds.maxRows || this.bytes > this.#bounds.maxBytes;
  }

  #pruneSize(): void {
    if (!this.#over()) return;
    const select = this.#db.prepare(`SELECT id, bytes FROM ${this.#table} ORDER BY created_at, rowid LIMIT 256`);
    const del = this.#db.prepare(`DELETE FROM ${this.#table} WHERE id = ?`);
    this.#db.transaction(() => {
      while (this.#over()) {
        const batch = select.all() as Array<{ id: string; bytes: number }>;
        if (batch.length === 0) break;
        for (const row of batch) {
          if (!this.#over()) break;
          del.run(row.id);
          this.removed(row.bytes);
        }
      }
    })();
  }
}

/** The same bounds for a store without SQLite: a Map whose insertion order is age order. */
export class BoundedMap<V> {
  rows = 0;
  bytes = 0;
  readonly #map = new Map<string, { value: V; bytes: number; createdAt: number }>();
  readonly #bounds: RowBounds;

  constructor(bounds: RowBounds) {
    this.#bounds = bounds;
  }

  /** Stores `value` (replacing the id's earlier value, which then counts as the newest), then drops the oldest beyond the bounds. */
  set(id: string, value: V, bytes: number, createdAt: number): void {
    this.delete(id);
    this.#map.set(id, { value, bytes, createdAt });
    this.rows++;
    this.bytes += bytes;
    const cutoff = Date.now() - this.#bounds.maxAgeMs;
    for (const [key, e] of this.#map) {
      if (e.createdAt >= cutoff && this.rows <= this.#bounds.maxRows && this.bytes <= this.#bounds.maxBytes) break;
      this.delete(key);
    }
  }

  /** The value, undefined when unknown or older than the age bound. */
  get(id: string): V | undefined {
    const e = this.#map.get(id);
    return e && e.createdAt >= Date.now() - this.#bounds.maxAgeMs ? e.value : undefined;
  }

  /** Removes the id; its value (expired or not) or undefined. */
  delete(id: string): V | undefined {
    const e = this.#map.get(id);
    if (!e) return undefined;
    this.#map.delete(id);
    this.rows--;
    this.bytes -= e.bytes;
    return e.value;
  }

  clear(): void {
    this.#map.clear();
    this.rows = 0;
    this.bytes = 0;
  }
}
