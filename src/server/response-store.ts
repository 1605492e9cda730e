// Stored responses of the Responses API (`store: true`, `previous_response_id`): the response
// object and every input item the model saw, per tenant, bounded by rows, bytes and age. A table
// beside the tool-call store in the same SQLite file (its own connection; WAL lets both write).
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Database as SqliteDatabase, Statement } from 'better-sqlite3';
import { LlamuxError } from '../errors.js';
import { loadSqlite } from './store.js';
import { BoundedMap, BoundedTable } from './bounded-rows.js';

export interface StoredResponse {
  id: string;
  /** The tenant (isolation mode), '' outside it. */
  tenant: string;
  /** The conversation (its id as the client sees it) whose Session the response continued. */
  conversation: string;
  /** The response object as the API returns it, as JSON text. */
  response: string;
  /** Every input item the model saw (those of earlier responses first), as a JSON array. */
  input: string;
  createdAt: number;
}

export interface ResponseStoreLimits {
  /** Responses kept (default 10 000). */
  maxRows?: number;
  /** Bytes of response and input JSON kept (default 256 MiB). */
  maxBytes?: number;
  /** Age in ms after which a response is gone (default 30 days). */
  maxAgeMs?: number;
}

/** A lookup the store could not answer (SQLite failed): the caller goes on without it. */
export interface StoreFailure {
  failed: string;
}

interface Row {
  id: string;
  tenant: string;
  conversation: string;
  response: string;
  input: string;
  created_at: number;
}

function bytesOf(r: StoredResponse): number {
  return Buffer.byteLength(r.response) + Buffer.byteLength(r.input) + r.id.length + r.conversation.length;
}

/** Whether the stored JSON reads back as what was written (a torn or foreign row is a miss). */
function wellFormed(r: StoredResponse): boolean {
  try {
    const response = JSON.parse(r.response) as { id?: unknown; output?: unknown };
    return response?.id === r.id && Array.isArray(response.output) && Array.isArray(JSON.parse(r.input));
  } catch {
    return false;
  }
}

/**
 * Stored responses by id, scoped by tenant: another tenant's id reads as unknown. `put`, `get`
 * and `delete` never throw: a store that fails is counted and reported to the caller, which
 * answers without it.
 */
export class ResponseStore {
  readonly path: string;
  readonly backend: 'sqlite' | 'memory';
  #db?: SqliteDatabase;
  #table?: BoundedTable;
  #mem?: BoundedMap<StoredResponse>;
  #insert?: Statement;
  #get?: Statement;
  #delete?: Statement;
  #limits: Required<ResponseStoreLimits>;
  /** Reads or writes that failed (the request went on without the store). */
  failures = 0;

  constructor(path: string, limits: ResponseStoreLimits = {}) {
    this.path = path;
    this.#limits = {
      maxRows: limits.maxRows ?? 10_000,
      maxBytes: limits.maxBytes ?? 256 * 1024 * 1024,
      maxAgeMs: limits.maxAgeMs ?? 30 * 24 * 3600 * 1000,
    };
    const Database = loadSqlite();
    if (!Database) {
      if (path !== ':memory:') {
        throw new LlamuxError('UNSUPPORTED', `The response store "${path}" needs the optional package better-sqlite3, which is not installed: run \`npm install better-sqlite3@12\` (or leave out --store to keep responses in memory)`);
      }
      this.backend = 'memory';
      this.#mem = new BoundedMap(this.#limits);
      return;
    }
    this.backend = 'sqlite';
    let db: SqliteDatabase | undefined;
    try {
      if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
      db = new Database(path);
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = NORMAL');
      // Two connections write the same file: wait for the other's lock instead of failing.
      db.pragma('busy_timeout = 2000');
      db.exec(`
        CREATE TABLE IF NOT EXISTS responses (
          id TEXT PRIMARY KEY,
          tenant TEXT NOT NULL,
          conversation TEXT NOT NULL,
          response TEXT NOT NULL,
          input TEXT NOT NULL,
          bytes INTEGER NOT NULL,
          created_at INTEGER NOT NULL
        );
        CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at);
      `);
      this.#db = db;
      this.#insert = db.prepare(`INSERT OR REPLACE INTO responses (id, tenant, conversation, response, input, bytes, created_at)
        VALUES (@id, @tenant, @conversation, @response, @input, @bytes, @created_at)`);
      this.#get = db.prepare('SELECT id, tenant, conversation, response, input, created_at FROM responses WHERE id = ?');
      this.#delete = db.prepare('DELETE FROM responses WHERE id = ? AND tenant = ?');
      this.#table = new BoundedTable(db, 'responses', this.#limits);
    } catch (e) {
      try {
        db?.close();
      } catch {
        // already unusable
      }
      throw new LlamuxError('INVALID_ARGUMENT', `The response store "${path}" cannot be opened: ${(e as Error).message}`, { cause: e });
    }
  }

  /** Responses and bytes held now. */
  get size(): { rows: number; bytes: number } {
    const b = (this.#mem ?? this.#table)!;
    return { rows: b.rows, bytes: b.bytes };
  }

  /** Stores a response; false (counted) when the store cannot write. */
  put(r: StoredResponse): boolean {
    try {
      const bytes = bytesOf(r);
      if (this.#mem) this.#mem.set(r.id, { ...r }, bytes, r.createdAt);
      else {
        const existed = this.#get!.get(r.id) !== undefined;
        this.#insert!.run({ id: r.id, tenant: r.tenant, conversation: r.conversation, response: r.response, input: r.input, bytes, created_at: r.createdAt });
        this.#table!.added(bytes, existed);
      }
      return true;
    } catch {
      this.failures++;
      return false;
    }
  }

  /** The tenant's stored response, undefined when unknown, expired, deleted or another tenant's. */
  get(id: string, tenant: string): StoredResponse | undefined | StoreFailure {
    try {
      const r = this.#read(id);
      if (!r || r.tenant !== tenant || r.createdAt < Date.now() - this.#limits.maxAgeMs) return undefined;
      return wellFormed(r) ? r : undefined;
    } catch (e) {
      this.failures++;
      return { failed: (e as Error).message };
    }
  }

  /** Deletes the tenant's response: true when there was one, a failure when the store cannot tell. */
  delete(id: string, tenant: string): boolean | StoreFailure {
    try {
      if (this.#mem) {
        const hit = this.#mem.get(id);
        if (!hit || hit.tenant !== tenant) return false;
        this.#mem.delete(id);
        return true;
      }
      const before = this.#get!.get(id) as Row | undefined;
      const changed = this.#delete!.run(id, tenant).changes > 0;
      if (changed) this.#table!.removed(bytesOf(fromRow(before!)));
      return changed && before!.created_at >= this.#table!.cutoff();
    } catch (e) {
      this.failures++;
      return { failed: (e as Error).message };
    }
  }

  #read(id: string): StoredResponse | undefined {
    if (this.#mem) {
      const hit = this.#mem.get(id);
      return hit ? { ...hit } : undefined;
    }
    const r = this.#get!.get(id) as Row | undefined;
    return r ? fromRow(r) : undefined;
  }

  close(): void {
    if (this.#mem) this.#mem.clear();
    else if (this.#db?.open) this.#db.close();
  }
}

function fromRow(r: Row): StoredResponse {
  return { id: r.id, tenant: r.tenant, conversation: r.conversation, response: r.response, input: r.input, createdAt: r.created_at };
}
