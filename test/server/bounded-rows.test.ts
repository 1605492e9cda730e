// The bounds both server stores share (src/server/bounded-rows.ts): oldest first, by rows, bytes
// and age, on SQLite and in memory (the memory form serves when better-sqlite3 is missing).
import { describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { BoundedMap, BoundedTable } from '../../src/server/bounded-rows.js';

const FAR = 3_600_000;

describe('BoundedMap', () => {
  it('drops the oldest beyond maxRows, counting a replaced id once', () => {
    const m = new BoundedMap<string>({ maxRows: 2, maxBytes: 1e9, maxAgeMs: FAR });
    const now = Date.now();
    m.set('a', 'A', 10, now);
    m.set('b', 'B', 10, now);
    m.set('a', 'A2', 30, now); // replaced: now the newest
    expect([m.rows, m.bytes]).toEqual([2, 40]);
    m.set('c', 'C', 5, now);
    expect([m.get('a'), m.get('b'), m.get('c')]).toEqual(['A2', undefined, 'C']);
    expect([m.rows, m.bytes]).toEqual([2, 35]);
  });

  it('drops the oldest beyond maxBytes and hides (then drops) rows past maxAgeMs', () => {
    const m = new BoundedMap<number>({ maxRows: 100, maxBytes: 100, maxAgeMs: 1000 });
    const now = Date.now();
    m.set('old', 1, 60, now - 5000); // already past the age bound: unreadable
    expect(m.get('old')).toBeUndefined();
    m.set('x', 2, 60, now); // 120 bytes > 100, and 'old' is too old: it goes
    expect([m.rows, m.bytes, m.get('x')]).toEqual([1, 60, 2]);
    expect(m.delete('x')).toBe(2);
    expect([m.rows, m.bytes]).toEqual([0, 0]);
  });
});

describe('BoundedTable', () => {
  function table(): Database.Database {
    const db = new Database(':memory:');
    db.exec('CREATE TABLE t (id TEXT PRIMARY KEY, bytes INTEGER NOT NULL, created_at INTEGER NOT NULL)');
    return db;
  }

  it('prunes what a reopened file holds beyond the bounds, oldest first', () => {
    const db = table();
    const now = Date.now();
    const ins = db.prepare('INSERT INTO t (id, bytes, created_at) VALUES (?, ?, ?)');
    ins.run('expired', 1, now - 10 * FAR);
    for (let i = 0; i < 5; i++) ins.run(`r${i}`, 100, now - 5 + i);
    const b = new BoundedTable(db, 't', { maxRows: 3, maxBytes: 1e9, maxAgeMs: FAR });
    expect([b.rows, b.bytes]).toEqual([3, 300]);
    expect((db.prepare('SELECT id FROM t ORDER BY id').all() as Array<{ id: string }>).map((r) => r.id)).toEqual(['r2', 'r3', 'r4']);
  });

  it('keeps counts through inserts, replacements and removals, and stays under maxBytes', () => {
    const db = table();
    const b = new BoundedTable(db, 't', { maxRows: 100, maxBytes: 250, maxAgeMs: FAR });
    const put = db.prepare('INSERT OR REPLACE INTO t (id, bytes, created_at) VALUES (?, ?, ?)');
    const now = Date.now();
    put.run('a', 100, now);
    b.added(100, false);
    put.run('b', 100, now + 1);
    b.added(100, false);
    put.run('a', 120, now + 2); // replaced: recounted from the table
    b.added(120, true);
    expect([b.rows, b.bytes]).toEqual([2, 220]);
    put.run('c', 100, now + 3); // 320 > 250: the oldest ('b') goes
    b.added(100, false);
    expect([b.rows, b.bytes]).toEqual([2, 220]);
    expect((db.prepare('SELECT id FROM t ORDER BY id').all() as Array<{ id: string }>).map((r) => r.id)).toEqual(['a', 'c']);
    db.prepare('DELETE FROM t WHERE id = ?').run('c');
    b.removed(100);
    b.recount();
    expect([b.rows, b.bytes]).toEqual([1, 120]);
    expect(b.cutoff()).toBeLessThanOrEqual(Date.now() - FAR);
  });
});
