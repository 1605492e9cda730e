// The tool-call store: the exact bytes and tokens of every call the server returned, under its
// id, in SQLite (WAL), so a later request — even to a restarted server — replays them verbatim.
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { LlamuxError } from '../errors.js';
import { BoundedMap, BoundedTable } from './bounded-rows.js';
import type BetterSqlite3 from 'better-sqlite3';
import type { Database as SqliteDatabase, Statement } from 'better-sqlite3';

// better-sqlite3 is an optional peer dependency: only a store on disk needs it, so a library
// user never compiles it. Loaded on first use.
let sqlite: typeof BetterSqlite3 | null | undefined;
/** better-sqlite3, or null when it is not installed. */
export function loadSqlite(): typeof BetterSqlite3 | null {
  if (sqlite === undefined) {
    try {
      sqlite = createRequire(import.meta.url)('better-sqlite3') as typeof BetterSqlite3;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw e;
      sqlite = null;
    }
  }
  return sqlite;
}

/** One stored call. */
export interface StoredToolCall {
  id: string;
  /** Fingerprint of the model that generated it: tokens only replay into the same vocabulary. */
  model: string;
  conversation: string;
  name: string;
  /** Canonical JSON of the decoded arguments ('' when they were malformed). */
  arguments: string;
  /** Exact bytes between the markers. */
  spanText: string;
  /** Exact tokens of the span, markers included. */
  spanTokens: Int32Array;
  /** Text (and its tokens) the model generated in the same turn before the span. */
  preludeText?: string;
  preludeTokens?: Int32Array;
  /** Calls sharing the span (spans of several calls are never replayed). */
  callsInSpan: number;
  createdAt: number;
}

/** One stored assistant turn the server generated (whole-turn replay), under its key. */
export interface StoredTurn {
  /** `call:<first call id>` for a turn with calls, else a hash of its tenant, reasoning and content. */
  key: string;
  model: string;
  conversation: string;
  /** The reasoning and answer as the client received them (the turn is replayed only while they are unchanged). */
  reasoning: string;
  content: string;
  /** The turn's calls as returned: id, name, canonical JSON of the arguments. */
  calls: Array<{ id: string; name: string; arguments: string }>;
  /** The exact generated text (special tokens as text) and tokens of the turn, end-of-generation token excluded. */
  text: string;
  tokens: Int32Array;
  createdAt: number;
}

/** Turns share the tool-call table (and its bounds) under ids no tool call has. */
const TURN_PREFIX = 'turn:';

export interface ToolCallStoreLimits {
  /** Rows kept (default 100 000). */
  maxRows?: number;
  /** Bytes of span data kept (default 256 MiB). */
  maxBytes?: number;
  /** Age in ms after which a row is dropped (default 7 days). */
  maxAgeMs?: number;
}

interface Row {
  id: string;
  model: string;
  conversation: string;
  name: string;
  arguments: string;
  span_text: string;
  span_tokens: Buffer;
  prelude_text: string | null;
  prelude_tokens: Buffer | null;
  calls_in_span: number;
  created_at: number;
}

function toBlob(tokens: Int32Array): Buffer {
  const b = Buffer.alloc(tokens.length * 4);
  for (let i = 0; i < tokens.length; i++) b.writeInt32LE(tokens[i]!, i * 4);
  return b;
}

function fromBlob(b: Buffer): Int32Array {
  const out = new Int32Array(b.length >> 2);
  for (let i = 0; i < out.length; i++) out[i] = b.readInt32LE(i * 4);
  return out;
}

/**
 * SQLite-backed map from tool-call id to its exact span. Bounded by rows, bytes and age (oldest
 * rows go first). `path` ':memory:' keeps it in memory.
 */
export class ToolCallStore {
  readonly path: string;
  /** 'sqlite', or 'memory' when better-sqlite3 is not installed and the path is ':memory:'. */
  readonly backend: 'sqlite' | 'memory';
  #db!: SqliteDatabase;
  #table!: BoundedTable;
  /** The store without SQLite. */
  #mem?: BoundedMap<StoredToolCall>;
  #insert!: Statement;
  #get!: Statement;
  #limits: Required<ToolCallStoreLimits>;

  constructor(path: string, limits: ToolCallStoreLimits = {}) {
    this.path = path;
    this.#limits = {
      maxRows: limits.maxRows ?? 100_000,
      maxBytes: limits.maxBytes ?? 256 * 1024 * 1024,
      maxAgeMs: limits.maxAgeMs ?? 7 * 24 * 3600 * 1000,
    };
    const Database = loadSqlite();
    if (!Database) {
      if (path !== ':memory:') {
        throw new LlamuxError('UNSUPPORTED', `The tool-call store "${path}" needs the optional package better-sqlite3, which is not installed: run \`npm install better-sqlite3@12\` (or leave out --store to keep tool calls in memory)`);
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
      this.#db = db;
      this.#open();
    } catch (e) {
      // Never leave the file open after refusing to start.
      try {
        db?.close();
      } catch {
        // already unusable
      }
      throw new LlamuxError('INVALID_ARGUMENT', `The tool-call store "${path}" cannot be opened: ${(e as Error).message}`, { cause: e });
    }
  }

  #open(): void {
    this.#db.pragma('journal_mode = WAL');
    this.#db.pragma('synchronous = NORMAL');
    this.#db.exec(`
      CREATE TABLE IF NOT EXISTS tool_calls (
        id TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        conversation TEXT NOT NULL,
        name TEXT NOT NULL,
        arguments TEXT NOT NULL,
        span_text TEXT NOT NULL,
        span_tokens BLOB NOT NULL,
        prelude_text TEXT,
        prelude_tokens BLOB,
        calls_in_span INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE INDEX IF NOT EXISTS tool_calls_created ON tool_calls (created_at);
    `);
    this.#insert = this.#db.prepare(`INSERT OR REPLACE INTO tool_calls
      (id, model, conversation, name, arguments, span_text, span_tokens, prelude_text, prelude_tokens, calls_in_span, bytes, created_at)
      VALUES (@id, @model, @conversation, @name, @arguments, @span_text, @span_tokens, @prelude_text, @prelude_tokens, @calls_in_span, @bytes, @created_at)`);
    this.#get = this.#db.prepare('SELECT * FROM tool_calls WHERE id = ?');
    this.#table = new BoundedTable(this.#db, 'tool_calls', this.#limits);
  }

  /** Rows and span bytes held now. */
  get size(): { rows: number; bytes: number } {
    const b = this.#mem ?? this.#table;
    return { rows: b.rows, bytes: b.bytes };
  }

  /**
   * Stores a call's exact bytes and tokens. Returns false when the database cannot write
   * (full disk, closed, ...): replay then falls back to rendering, nothing fails.
   */
  put(call: StoredToolCall): boolean {
    try {
      this.#put(call);
      return true;
    } catch {
      this.failures++;
      return false;
    }
  }

  /** A stored call, or undefined (unknown, expired, or the database cannot be read). */
  get(id: string): StoredToolCall | undefined {
    if (id.startsWith(TURN_PREFIX)) return undefined;
    try {
      return this.#read(id);
    } catch {
      this.failures++;
      return undefined;
    }
  }

  /** Stores a whole turn; false when the database cannot write (see put). */
  putTurn(turn: StoredTurn): boolean {
    return this.put({
      id: `${TURN_PREFIX}${turn.key}`,
      model: turn.model,
      conversation: turn.conversation,
      name: '',
      arguments: JSON.stringify({ reasoning: turn.reasoning, content: turn.content, calls: turn.calls }),
      spanText: turn.text,
      spanTokens: turn.tokens,
      callsInSpan: turn.calls.length,
      createdAt: turn.createdAt,
    });
  }

  /** A stored turn, or undefined (unknown, expired, unreadable, or a row that is not a turn). */
  getTurn(key: string): StoredTurn | undefined {
    let row: StoredToolCall | undefined;
    try {
      row = this.#read(`${TURN_PREFIX}${key}`);
    } catch {
      this.failures++;
      return undefined;
    }
    if (!row || row.name !== '') return undefined;
    try {
      const meta = JSON.parse(row.arguments) as Partial<Pick<StoredTurn, 'reasoning' | 'content' | 'calls'>>;
      if (typeof meta.reasoning !== 'string' || typeof meta.content !== 'string' || !Array.isArray(meta.calls)) return undefined;
      const calls = meta.calls.filter((c) => typeof c?.id === 'string' && typeof c.name === 'string' && typeof c.arguments === 'string');
      if (calls.length !== meta.calls.length) return undefined;
      return { key, model: row.model, conversation: row.conversation, reasoning: meta.reasoning, content: meta.content, calls, text: row.spanText, tokens: row.spanTokens, createdAt: row.createdAt };
    } catch {
      return undefined; // not written by putTurn: never replayed
    }
  }

  /** Reads or writes that failed (the request went on without the store). */
  failures = 0;

  #put(call: StoredToolCall): void {
    const spanBlob = toBlob(call.spanTokens);
    const preludeBlob = call.preludeTokens ? toBlob(call.preludeTokens) : null;
    const bytes = Buffer.byteLength(call.spanText) + spanBlob.length + Buffer.byteLength(call.preludeText ?? '') + (preludeBlob?.length ?? 0) + Buffer.byteLength(call.arguments);
    if (this.#mem) {
      this.#mem.set(call.id, { ...call }, bytes, call.createdAt);
      return;
    }
    const existed = this.#get.get(call.id) as Row | undefined;
    this.#insert.run({
      id: call.id,
      model: call.model,
      conversation: call.conversation,
      name: call.name,
      arguments: call.arguments,
      span_text: call.spanText,
      span_tokens: spanBlob,
      prelude_text: call.preludeText ?? null,
      prelude_tokens: preludeBlob,
      calls_in_span: call.callsInSpan,
      bytes,
      created_at: call.createdAt,
    });
    this.#table.added(bytes, existed !== undefined);
  }

  #read(id: string): StoredToolCall | undefined {
    if (this.#mem) {
      const call = this.#mem.get(id);
      return call ? { ...call } : undefined;
    }
    const r = this.#get.get(id) as Row | undefined;
    if (!r || r.created_at < this.#table.cutoff()) return undefined;
    const out: StoredToolCall = {
      id: r.id,
      model: r.model,
      conversation: r.conversation,
      name: r.name,
      arguments: r.arguments,
      spanText: r.span_text,
      spanTokens: fromBlob(r.span_tokens),
      callsInSpan: r.calls_in_span,
      createdAt: r.created_at,
    };
    if (r.prelude_text !== null && r.prelude_tokens !== null) {
      out.preludeText = r.prelude_text;
      out.preludeTokens = fromBlob(r.prelude_tokens);
    }
    return out;
  }

  close(): void {
    if (this.#mem) this.#mem.clear();
    else if (this.#db.open) this.#db.close();
  }
}
