// Fault injection into the tool-call store (issue 9). The store is an optimisation: it lets a
// later request replay the exact tokens of a call. When it cannot write (full disk), cannot read or
// write at all (a failed database), or lost its file, the server must keep answering, and replay
// must fall back to rendering the call through the template. A store that cannot be opened at
// startup must fail clearly and leave nothing open.
import { rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, ToolCallStore, type LlamuxServer } from '../../src/server/index.js';
import { faultyFs, filesBelow, type FaultyFs } from '../hardening/fs-faults.js';
import { tempDir as newTempDir } from '../helpers/paths.js';
import { anthropicFor, openaiFor } from './clients.js';
import { ANSWER, ANTHROPIC_TOOLS, OPENAI_TOOLS, QUESTION, WEATHER_RESULT, ensureChatModels } from './fixtures.js';

type Completion = OpenAI.Chat.Completions.ChatCompletion;
type Call = { id: string; name: string; arguments: string };

const scratch: string[] = [];
/** A fresh folder under .cache/tmp, removed after the file. */
function tempDir(name: string): string {
  const dir = newTempDir(name);
  scratch.push(dir);
  return dir;
}

function replayCount(metrics: string, outcome: string): number {
  const m = new RegExp(`^llamux_tool_call_replay_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(metrics);
  return m ? Number(m[1]) : 0;
}

describe('tool-call store faults', () => {
  let model: Model;
  const servers: LlamuxServer[] = [];
  const mounts: FaultyFs[] = [];

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
  });
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
  });
  afterAll(async () => {
    await model?.dispose();
    for (const m of mounts) m.dispose();
    for (const d of scratch) rmSync(d, { recursive: true, force: true });
  });

  async function start(storePath?: string): Promise<LlamuxServer> {
    const s = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1, ...(storePath ? { storePath } : {}) });
    servers.push(s);
    return s;
  }
  const metrics = async (s: LlamuxServer): Promise<string> => (await fetch(`${s.url}/metrics`)).text();

  /** Turn 1: the model calls get_weather for Paris. */
  async function turn1(s: LlamuxServer): Promise<Call> {
    const r: Completion = await openaiFor(s).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS });
    const c = r.choices[0]!.message.tool_calls?.[0];
    if (c?.type !== 'function') throw new Error(`expected a tool call, got ${JSON.stringify(r.choices[0]!.message)}`);
    expect(r.choices[0]!.finish_reason).toBe('tool_calls');
    expect(c.function).toEqual({ name: 'get_weather', arguments: '{"city":"Paris"}' });
    return { id: c.id, name: c.function.name, arguments: c.function.arguments };
  }

  /** Turn 2 with the call in the history: the model answers in text. */
  async function turn2(s: LlamuxServer, call: Call) {
    const r = await openaiFor(s).chat.completions.create({
      model: 'x',
      messages: [
        { role: 'user', content: QUESTION },
        { role: 'assistant', content: null, tool_calls: [{ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } }] },
        { role: 'tool', tool_call_id: call.id, content: WEATHER_RESULT },
      ],
      tools: OPENAI_TOOLS,
    });
    expect(r.choices[0]!.message.content).toBe(ANSWER);
    return r;
  }

  /** Turn 1 streamed: the tool call arrives, then [DONE], and no error event. */
  async function turn1Streamed(s: LlamuxServer): Promise<void> {
    const res = await fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', stream: true, messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS }),
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toMatch(/"error"/);
    expect(text).toContain('"tool_calls"');
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
  }

  /** Anthropic turn 1 (a tool_use block); returns the assistant content. */
  async function anthropicTurn1(s: LlamuxServer) {
    const first = await anthropicFor(s).messages.create({ model: 'x', max_tokens: 64, messages: [{ role: 'user', content: QUESTION }], tools: ANTHROPIC_TOOLS });
    const use = first.content.find((b) => b.type === 'tool_use');
    if (use?.type !== 'tool_use') throw new Error(`expected tool_use, got ${JSON.stringify(first.content)}`);
    expect(use.input).toEqual({ city: 'Paris' });
    return { content: first.content, id: use.id };
  }

  /** Anthropic turn 2 after a tool_use with this id, and count_tokens of the same history. */
  async function anthropicTurn2(s: LlamuxServer, id: string): Promise<void> {
    const messages = [
      { role: 'user' as const, content: QUESTION },
      { role: 'assistant' as const, content: [{ type: 'tool_use' as const, id, name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user' as const, content: [{ type: 'tool_result' as const, tool_use_id: id, content: WEATHER_RESULT }] },
    ];
    const second = await anthropicFor(s).messages.create({ model: 'x', max_tokens: 64, messages, tools: ANTHROPIC_TOOLS });
    expect(second.content).toEqual([{ type: 'text', text: ANSWER }]);
    const count = await anthropicFor(s).messages.countTokens({ model: 'x', messages, tools: ANTHROPIC_TOOLS });
    expect(count.input_tokens).toBeGreaterThan(0);
  }

  describe('a full disk', () => {
    let fs: FaultyFs;
    let server: LlamuxServer;
    let before: Call;
    let m0: string;
    beforeAll(async () => {
      fs = faultyFs('store-full', 256);
      mounts.push(fs);
      server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1, storePath: join(fs.dir, 'tool-calls.sqlite') });
      before = await turn1(server); // stored while there is space
      expect(server.store.size.rows).toBe(2); // the call and its whole turn
      fs.fill();
      if (fs.tmpfs) expect(fs.faulty()).toBe(true);
      m0 = await metrics(server);
    });
    afterAll(async () => {
      await server?.close();
      fs.free();
    });

    it('replays a call stored before the disk filled (reads still work)', async () => {
      const r = await turn2(server, before);
      expect(r.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
      expect(replayCount(await metrics(server), 'replayed')).toBe(replayCount(m0, 'replayed') + 1);
    });

    it('renders the follow-up of a call the store does not hold', async () => {
      const m = await metrics(server);
      await turn2(server, { id: 'call_never_stored', name: 'get_weather', arguments: '{"city":"Paris"}' });
      expect(replayCount(await metrics(server), 'unknown')).toBe(replayCount(m, 'unknown') + 1);
    });

    it('returns the tool calls it generates while the store cannot write them (OpenAI)', async () => {
      for (let i = 0; i < 3; i++) await turn2(server, await turn1(server));
      if (fs.tmpfs) expect(server.store.size.rows).toBe(2);
    });

    it('returns the tool calls it generates while the store cannot write them (streamed)', async () => {
      await turn1Streamed(server);
    });

    it('returns the tool calls it generates while the store cannot write them (Anthropic)', async () => {
      const first = await anthropicTurn1(server);
      await anthropicTurn2(server, first.id);
    });

    it('stores and replays again once space is freed', async () => {
      fs.free();
      const after = await turn1(server);
      expect(server.store.get(after.id)).toMatchObject({ name: 'get_weather' });
      const m = await metrics(server);
      await turn2(server, after);
      expect(replayCount(await metrics(server), 'replayed')).toBe(replayCount(m, 'replayed') + 1);
    });
  });

  describe('a store that fails on every call', () => {
    let server: LlamuxServer;
    let stored: Call;
    beforeAll(async () => {
      server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1 });
      stored = await turn1(server);
      // Every statement of a closed database throws, like a store whose file went bad.
      server.store.close();
      // The store reports the failure and answers "unknown" instead of throwing.
      expect(server.store.get(stored.id)).toBeUndefined();
      expect(server.store.failures).toBeGreaterThan(0);
    });
    afterAll(async () => {
      await server?.close();
    });

    it('still answers requests that involve no tool call', async () => {
      const r = await openaiFor(server).chat.completions.create({ model: 'x', max_tokens: 3, messages: [{ role: 'user', content: 'hello' }] });
      expect(r.choices[0]!.finish_reason).toBe('length');
    });

    it('returns the tool calls it generates (OpenAI)', async () => {
      await turn1(server);
    });

    it('returns the tool calls it generates (streamed)', async () => {
      await turn1Streamed(server);
    });

    it('returns the tool calls it generates (Anthropic)', async () => {
      await anthropicTurn1(server);
    });

    it('renders the follow-ups of calls it cannot look up (OpenAI, Anthropic, count_tokens)', async () => {
      await turn2(server, stored);
      await anthropicTurn2(server, 'toolu_unknown');
    });
  });

  describe('store files that vanish', () => {
    it('keeps serving when the database files are deleted under it, and starts empty after a restart', async () => {
      const dir = tempDir('store-vanish');
      const storePath = join(dir, 'tool-calls.sqlite');
      let server = await start(storePath);
      const first = await turn1(server);
      for (const f of filesBelow(dir)) rmSync(f);
      // SQLite keeps its open files: the running server still stores and replays.
      const second = await turn1(server);
      const m0 = await metrics(server);
      await turn2(server, first);
      await turn2(server, second);
      expect(replayCount(await metrics(server), 'replayed')).toBe(replayCount(m0, 'replayed') + 2);
      await server.close();
      servers.length = 0;
      // After a restart the store is new and empty: the old ids fall back to rendering.
      server = await start(storePath);
      expect(server.store.size.rows).toBe(0);
      const m1 = await metrics(server);
      await turn2(server, first);
      expect(replayCount(await metrics(server), 'unknown')).toBe(replayCount(m1, 'unknown') + 1);
      const third = await turn1(server);
      expect(server.store.get(third.id)).toBeDefined();
    });
  });

  describe('a store that cannot be opened at startup', () => {
    let fs: FaultyFs;
    const failures: Array<{ what: string; storePath: string; error: unknown; openFiles: string[] }> = [];

    beforeAll(async () => {
      fs = faultyFs('store-ro', 512);
      mounts.push(fs);
      // A store written by an earlier run, then the file system turns read-only.
      const roPath = join(fs.dir, 'tool-calls.sqlite');
      const earlier = new ToolCallStore(roPath);
      earlier.put({ id: 'call_1', model: 'm', conversation: 'c', name: 'f', arguments: '{}', spanText: 'x', spanTokens: Int32Array.from([1, 2]), callsInSpan: 1, createdAt: Date.now() });
      earlier.close();
      fs.readOnly();
      const dir = tempDir('store-bad');
      const notADb = join(dir, 'garbage.sqlite');
      writeFileSync(notADb, Buffer.alloc(8192, 0x41));
      const fileAsDir = join(dir, 'plain-file');
      writeFileSync(fileAsDir, 'x');
      const cases = [
        { what: 'a database on a read-only file system', storePath: roPath },
        { what: 'a new database below a read-only file system', storePath: join(fs.dir, 'sub', 'tool-calls.sqlite') },
        { what: 'a file that is not a database', storePath: notADb },
        { what: 'a directory', storePath: dir },
        { what: 'a path below a regular file', storePath: join(fileAsDir, 'tool-calls.sqlite') },
      ];
      for (const c of cases) {
        const error = await createServer({ model, port: 0, ctx: 1024, parallel: 1, threads: 1, storePath: c.storePath }).then(
          async (s) => {
            await s.close();
            return undefined;
          },
          (e: unknown) => e,
        );
        failures.push({ ...c, error, openFiles: fs.openFiles() });
      }
    });
    afterAll(() => fs.readWrite());

    it('refuses to start, with an error that names the store file', () => {
      for (const f of failures) {
        if (f.what.includes('read-only') && !fs.tmpfs) continue; // no fault could be injected
        expect(f.error, f.what).toBeInstanceOf(Error);
        const message = (f.error as Error).message;
        expect(message.includes(f.storePath) || message.includes(dirname(f.storePath)), `${f.what}: "${message}"`).toBe(true);
      }
    });

    it('leaves no file of the store open after refusing', () => {
      for (const f of failures) expect(f.openFiles, f.what).toEqual([]);
    });

    it('leaves the model usable (the context it created is gone)', async () => {
      const server = await start();
      await turn1(server);
      await turn2(server, await turn1(server));
    });
  });
});
