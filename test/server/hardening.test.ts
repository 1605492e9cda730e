// Server hardening (issue #15): tokenization off the event loop, Host and Content-Type checks,
// conversation routing and tenant isolation, HTTP statuses for errors known before the first
// byte, validation of stored spans, undeclared tools, slow and idle clients, aborted requests.
import { createServer as createHttpServer } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { SseWriter } from '../../src/server/http.js';
import { tempDir } from '../helpers/paths.js';
import { anthropicFor, openaiFor } from './clients.js';
import { ANSWER, OPENAI_TOOLS, QUESTION, WEATHER_RESULT, ensureChatModels } from './fixtures.js';

const LLAMA2 = '/work/shared/models/llama-2-tiny-random.gguf';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A raw HTTP/1.1 exchange on a fresh socket; resolves when the server closes it. */
function raw(url: string, head: string, timeoutMs = 10_000): Promise<{ status: number; text: string; closedAfterMs: number }> {
  const u = new URL(url);
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const s = connect(Number(u.port), u.hostname);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`the server kept the connection open for ${timeoutMs} ms`));
    }, timeoutMs);
    s.on('data', (c) => chunks.push(c));
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('utf8');
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text, closedAfterMs: Date.now() - started });
    });
    s.write(head);
  });
}

/** Polls /health one request after the other until `until` settles; returns the slowest answer in ms. */
async function healthWhile(server: LlamuxServer, until: Promise<unknown>): Promise<number> {
  let done = false;
  void until.finally(() => (done = true));
  let worst = 0;
  while (!done) {
    const t = performance.now();
    const r = await fetch(`${server.url}/health`);
    await r.text();
    worst = Math.max(worst, performance.now() - t);
    await sleep(5);
  }
  return worst;
}

function metricValue(text: string, re: RegExp): number {
  return [...text.matchAll(re)].reduce((a, m) => a + Number(m[1]), 0);
}

describe('createServer() hardening (#15)', () => {
  let demo: Model;
  let llama: Model;
  let storeDir: string;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    demo = await loadModel(paths.demo);
    llama = await loadModel(LLAMA2);
    storeDir = tempDir('hardening-store');
  });
  afterAll(async () => {
    await demo?.dispose();
    await llama?.dispose();
    if (storeDir) rmSync(storeDir, { recursive: true, force: true });
  });

  describe('tokenization runs in a worker with a byte bound and a time cap', () => {
    let server: LlamuxServer;
    beforeAll(async () => {
      server = await createServer({ model: llama, port: 0, ctx: 65536, parallel: 1, threads: 1, tokenizeTimeoutMs: 500, log: () => {} });
    });
    afterAll(async () => server?.close());

    it('tokenizes text one llama_tokenize call is quadratic on well within the time cap, while /health stays fast', async () => {
      // Control-token-like text: llama.cpp's special-token partition is quadratic in it (~3 s for
      // 128 KB in one call); the bounded tokenizer (issue 30) takes milliseconds. The server
      // tokenizes it twice (with and without special tokens, to keep them out of user content).
      const hostile = '</s><s>'.repeat(96 * 1024 / 7); // ~56 k tokens as text: fits the 64 k context
      const t0 = performance.now();
      const count = anthropicFor(server).messages.countTokens({ model: 'x', messages: [{ role: 'user', content: hostile }] });
      const worst = await healthWhile(server, count);
      const tokens = (await count).input_tokens;
      const ms = performance.now() - t0;
      console.log(`hostile request: ${tokens} tokens in ${ms.toFixed(0)} ms; slowest /health meanwhile ${worst.toFixed(1)} ms`);
      expect(tokens).toBeGreaterThan(96 * 1024 / 7);
      expect(worst).toBeLessThan(250);
      expect(server.prompts.timeouts).toBe(0); // well within the 500 ms cap
    });

    it('tokenizes a large emoji prompt off the event loop', async () => {
      const emoji = '😀'.repeat(12_000); // 48 KB, one byte token per byte
      const count = anthropicFor(server).messages.countTokens({ model: 'x', messages: [{ role: 'user', content: emoji }] });
      const worst = await healthWhile(server, count);
      expect((await count).input_tokens).toBeGreaterThan(48_000);
      expect(worst).toBeLessThan(250);
    });

    it('refuses text that cannot fit the context before tokenizing it (400), and text over maxPromptBytes (413)', async () => {
      const small = await createServer({ model: llama, port: 0, ctx: 2048, parallel: 1, threads: 1, maxPromptBytes: 20_000, log: () => {} });
      try {
        const openai = openaiFor(small);
        const tooLong = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: '😀'.repeat(100_000) }] }).catch((e: unknown) => e);
        expect(tooLong).toBeInstanceOf(APIError);
        expect((tooLong as APIError).status).toBe(400);
        expect((tooLong as APIError).message).toMatch(/at most 27 bytes per token/);
        const tooMuch = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'a b '.repeat(6_000) }] }).catch((e: unknown) => e);
        expect((tooMuch as APIError).status).toBe(413);
        expect((tooMuch as APIError).message).toMatch(/over this server's limit of 20000/);
      } finally {
        await small.close();
      }
    });
  });

  describe('Host allow-list, JSON bodies only, no empty API key', () => {
    let server: LlamuxServer;
    beforeAll(async () => {
      server = await createServer({ model: demo, port: 0, ctx: 2048, parallel: 1, threads: 1, allowedHosts: ['llm.internal'], log: () => {} });
    });
    afterAll(async () => server?.close());

    it('answers 403 to a Host that is not allowed (DNS rebinding) and serves loopback names and --allowed-host', async () => {
      const port = new URL(server.url).port;
      const get = (host: string) => raw(server.url, `GET /health HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
      for (const host of ['evil.example', `evil.example:${port}`, `attacker.test:${port}`, '']) {
        const r = await get(host);
        expect(r.status, host).toBe(403);
        expect(r.text).toMatch(/host_not_allowed/);
      }
      for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, 'localhost', `llm.internal:${port}`, `LLM.internal:${port}`]) {
        expect((await get(host)).status, host).toBe(200);
      }
      const any = await createServer({ model: demo, port: 0, ctx: 1024, parallel: 1, threads: 1, allowedHosts: ['*'], log: () => {} });
      try {
        expect((await raw(any.url, 'GET /health HTTP/1.1\r\nHost: whatever.example\r\nConnection: close\r\n\r\n')).status).toBe(200);
      } finally {
        await any.close();
      }
    });

    it('answers 415 to bodies that are not application/json (a browser can send those cross-origin)', async () => {
      const body = JSON.stringify({ model: 'x', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
      for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', undefined]) {
        for (const path of ['/v1/chat/completions', '/v1/messages', '/v1/messages/count_tokens']) {
          const res = await fetch(`${server.url}${path}`, { method: 'POST', body: new Blob([body], type ? { type } : {}) });
          expect(res.status, `${path} ${type}`).toBe(415);
          expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/Content-Type: application\/json/);
        }
      }
      const ok = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', body, headers: { 'content-type': 'application/json; charset=utf-8' } });
      expect(ok.status).toBe(200);
    });

    it('refuses an empty API key', async () => {
      await expect(createServer({ model: demo, port: 0, apiKey: '' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/must not be empty/) });
      await expect(createServer({ model: demo, port: 0, apiKey: ['a', ''] })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    });
  });

  describe('conversation routing and tenant isolation', () => {
    const turn1 = (openai: ReturnType<typeof openaiFor>, headers: Record<string, string>) =>
      openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS }, { headers });
    const turn2 = (openai: ReturnType<typeof openaiFor>, id: string, headers: Record<string, string>) =>
      openai.chat.completions
        .create(
          {
            model: 'x',
            messages: [
              { role: 'user', content: QUESTION },
              { role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
              { role: 'tool', tool_call_id: id, content: WEATHER_RESULT },
            ],
            tools: OPENAI_TOOLS,
          },
          { headers },
        )
        .withResponse();

    it('routes by the conversation header even when the request quotes another conversation’s tool id', async () => {
      const server = await createServer({ model: demo, port: 0, ctx: 4096, parallel: 2, threads: 1, log: () => {} });
      try {
        const openai = openaiFor(server);
        const first = await turn1(openai, { 'x-llamux-conversation': 'conv-a' });
        const id = first.choices[0]!.message.tool_calls![0]!.id;
        const own = await turn2(openai, id, {});
        expect(own.response.headers.get('x-llamux-conversation')).toBe('conv-a'); // no header: the call's conversation
        const other = await turn2(openai, id, { 'x-llamux-conversation': 'conv-b' });
        expect(other.response.headers.get('x-llamux-conversation')).toBe('conv-b');
        expect(other.data.choices[0]!.message.content).toBe(ANSWER);
      } finally {
        await server.close();
      }
    });

    it('keeps tenants apart: no shared session, no replay of another tenant’s calls, no cached_tokens from its KV', async () => {
      const server = await createServer({ model: demo, port: 0, ctx: 4096, parallel: 2, threads: 1, apiKey: 'k', isolateTenants: true, log: () => {} });
      try {
        const openai = openaiFor(server, 'k');
        const missing = await turn1(openai, {}).catch((e: unknown) => e);
        expect((missing as APIError).status).toBe(400);
        expect((missing as APIError).message).toMatch(/x-llamux-tenant/);
        const a = { 'x-llamux-tenant': 'alice', 'x-llamux-conversation': 'same' };
        const b = { 'x-llamux-tenant': 'bob', 'x-llamux-conversation': 'same' };
        const first = await turn1(openai, a);
        const id = first.choices[0]!.message.tool_calls![0]!.id;
        const mine = await turn2(openai, id, a);
        expect(mine.data.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
        const metrics = async () => (await fetch(`${server.url}/metrics`, { headers: { authorization: 'Bearer k' } })).text();
        const replayedBefore = metricValue(await metrics(), /^llamux_tool_call_replay_total\{outcome="replayed"\} (\d+)$/gm);
        const theirs = await turn2(openai, id, b);
        expect(theirs.data.choices[0]!.message.content).toBe(ANSWER);
        expect(theirs.data.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
        expect(metricValue(await metrics(), /^llamux_tool_call_replay_total\{outcome="replayed"\} (\d+)$/gm)).toBe(replayedBefore);
        // Bob without a conversation header does not land in Alice's conversation either.
        const routed = await turn2(openai, id, { 'x-llamux-tenant': 'bob' });
        expect(routed.response.headers.get('x-llamux-conversation')).not.toBe('same');
      } finally {
        await server.close();
      }
    });
  });

  describe('errors known before the first byte keep their status when streaming', () => {
    let server: LlamuxServer;
    beforeAll(async () => {
      server = await createServer({ model: llama, port: 0, ctx: 4096, parallel: 1, maxQueued: 0, threads: 1, log: () => {} });
    });
    afterAll(async () => server?.close());

    it('answers 400 to an invalid logit_bias with stream: true (openai client sees the status)', async () => {
      const e = await openaiFor(server)
        .chat.completions.create({ model: 'x', stream: true, max_tokens: 4, logit_bias: { '9999999': 5 }, messages: [{ role: 'user', content: 'hi' }] })
        .catch((err: unknown) => err);
      expect(e).toBeInstanceOf(APIError);
      expect((e as APIError).status).toBe(400);
    });

    it('answers 503 (OpenAI) and 529 (Anthropic) with Retry-After when the queue is full, streaming', async () => {
      const ac = new AbortController();
      // Holds the only sequence: end of generation is banned.
      const holder = await openaiFor(server).chat.completions.create(
        { model: 'x', stream: true, max_tokens: 3000, logit_bias: { '2': -100 }, messages: [{ role: 'user', content: 'hold' }] },
        { signal: ac.signal },
      );
      const it = holder[Symbol.asyncIterator]();
      await it.next();
      const o = await openaiFor(server).chat.completions.create({ model: 'x', stream: true, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
      expect((o as APIError).status).toBe(503);
      expect((o as APIError).headers?.get('retry-after')).toBe('1');
      const a = await anthropicFor(server).messages.create({ model: 'x', stream: true, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
      expect((a as { status: number }).status).toBe(529);
      expect((a as { headers: Headers }).headers.get('retry-after')).toBe('1');
      ac.abort();
      const deadline = Date.now() + 10_000;
      while (server.context.pendingRequests > 0 && Date.now() < deadline) await sleep(20);
    });
  });

  describe('stored spans are validated before they are spliced', () => {
    it('renders a tampered span through the template and logs it once', async () => {
      const storePath = join(storeDir, 'tamper.sqlite');
      const lines: string[] = [];
      const server = await createServer({ model: demo, port: 0, ctx: 4096, parallel: 1, threads: 1, storePath, log: (_l, m) => lines.push(m) });
      try {
        const openai = openaiFor(server);
        const ids: string[] = [];
        for (let i = 0; i < 3; i++) ids.push((await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS })).choices[0]!.message.tool_calls![0]!.id);
        const db = new Database(storePath);
        const row = (id: string) => db.prepare('SELECT span_tokens FROM tool_calls WHERE id = ?').get(id) as { span_tokens: Buffer };
        const outOfVocab = Buffer.from(row(ids[0]!).span_tokens);
        outOfVocab.writeInt32LE(99_999_999, 4);
        const otherToken = Buffer.from(row(ids[1]!).span_tokens);
        otherToken.writeInt32LE(otherToken.readInt32LE(4) === 5 ? 6 : 5, 4);
        const tooLong = Buffer.alloc(20_000 * 4, 0);
        const update = db.prepare('UPDATE tool_calls SET span_tokens = ? WHERE id = ?');
        update.run(outOfVocab, ids[0]);
        update.run(otherToken, ids[1]);
        update.run(tooLong, ids[2]);
        db.close();
        for (const id of ids) {
          for (let i = 0; i < 2; i++) {
            const r = await openai.chat.completions.create({
              model: 'x',
              messages: [
                { role: 'user', content: QUESTION },
                { role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
                { role: 'tool', tool_call_id: id, content: WEATHER_RESULT },
              ],
              tools: OPENAI_TOOLS,
            });
            expect(r.choices[0]!.message.content).toBe(ANSWER);
          }
        }
        expect(lines.filter((l) => l.includes(ids[0]!))).toEqual([expect.stringMatching(/outside the vocabulary/)]);
        expect(lines.filter((l) => l.includes(ids[1]!))).toEqual([expect.stringMatching(/do not detokenize to the stored text/)]);
        expect(lines.filter((l) => l.includes(ids[2]!))).toEqual([expect.stringMatching(/has 20000 tokens/)]);
        const metrics = await (await fetch(`${server.url}/metrics`)).text();
        expect(metricValue(metrics, /^llamux_tool_call_replay_total\{outcome="invalid"\} (\d+)$/gm)).toBe(3);
      } finally {
        await server.close();
      }
    });
  });

  describe('tool calls only for declared tools', () => {
    it('returns a span as text with finish_reason "stop" when the request declares no tools; declared tools constrain the span', async () => {
      const server = await createServer({ model: demo, port: 0, ctx: 4096, parallel: 1, threads: 1, log: () => {} });
      try {
        const openai = openaiFor(server);
        const r = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }] });
        const choice = r.choices[0]!;
        expect(choice.message.tool_calls).toBeUndefined();
        expect(choice.finish_reason).toBe('stop');
        expect(choice.message.content).toMatch(/<tool_call>.*get_weather.*<\/tool_call>/s);
        const a = await anthropicFor(server).messages.create({ model: 'x', max_tokens: 64, messages: [{ role: 'user', content: QUESTION }] });
        expect(a.content.every((b) => b.type === 'text')).toBe(true);
        expect(a.stop_reason).not.toBe('tool_use');
        // The model writes get_weather, but only get_time is declared: the tool grammar makes
        // the span a get_time call (no declared properties: empty arguments).
        const other = [{ type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: {} } } }];
        const c = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: other, temperature: 0 });
        const call = c.choices[0]!.message.tool_calls?.[0];
        expect(call?.type === 'function' && [call.function.name, JSON.parse(call.function.arguments)]).toEqual(['get_time', {}]);
        expect(c.choices[0]!.finish_reason).toBe('tool_calls');
      } finally {
        await server.close();
      }
    });
  });

  describe('slow, stalled and idle clients', () => {
    it('stops pulling events while the client does not read, and disconnects it after the send timeout', async () => {
      // The kernel's socket buffers absorb megabytes before the server sees backpressure, more
      // than a test model generates quickly: SseWriter (what both endpoints stream through) is
      // driven directly with 64 KiB events on a loopback connection.
      const waiting = { streamsWaiting: 0 };
      let pulled = 0;
      let sawWaiting = false;
      const finished = new Promise<void>((resolve) => {
        const http = createHttpServer((_req, res) => {
          const sse = new SseWriter(res, {}, 1_500, waiting);
          void (async () => {
            while (!sse.closed && pulled < 2_000) {
              const p = sse.send('x'.repeat(64 * 1024));
              sawWaiting ||= waiting.streamsWaiting > 0;
              await p;
              pulled++;
            }
            http.close();
            resolve();
          })();
        });
        http.listen(0, '127.0.0.1', () => {
          const s = connect((http.address() as AddressInfo).port, '127.0.0.1');
          s.on('error', () => {});
          s.pause(); // never reads
          s.write('GET / HTTP/1.1\r\nHost: localhost\r\n\r\n');
        });
      });
      const started = Date.now();
      await finished;
      expect(sawWaiting).toBe(true);
      expect(waiting.streamsWaiting).toBe(0);
      expect(pulled, 'events pulled while the client read nothing').toBeLessThan(2_000);
      expect(Date.now() - started).toBeLessThan(10_000);
      const server = await createServer({ model: demo, port: 0, ctx: 1024, parallel: 1, threads: 1, log: () => {} });
      try {
        expect(await (await fetch(`${server.url}/metrics`)).text()).toMatch(/^llamux_streams_waiting_for_client 0$/m);
      } finally {
        await server.close();
      }
    });

    it('closes connections that do not finish their headers or body in time, and caps connections', async () => {
      const server = await createServer({ model: demo, port: 0, ctx: 1024, parallel: 1, threads: 1, headersTimeoutMs: 500, requestTimeoutMs: 1_000, maxConnections: 4, log: () => {} });
      try {
        const headers = await raw(server.url, 'POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nX-Slow: ', 5_000);
        expect(headers.closedAfterMs).toBeLessThan(2_500);
        const body = await raw(server.url, 'POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"mo', 5_000);
        expect(body.closedAfterMs).toBeLessThan(3_000);
        const { hostname, port } = new URL(server.url);
        const idle: Socket[] = [];
        for (let i = 0; i < 4; i++) {
          const s = connect(Number(port), hostname);
          s.on('error', () => {});
          idle.push(s);
        }
        await sleep(100);
        const refused = await raw(server.url, 'GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n', 3_000);
        expect(refused.status).toBe(0); // closed without an answer
        for (const s of idle) s.destroy();
        await sleep(100);
        expect((await fetch(`${server.url}/health`)).status).toBe(200);
      } finally {
        await server.close();
      }
    });

    it('ends idle sessions on a timer, without another request arriving', async () => {
      const server = await createServer({ model: demo, port: 0, ctx: 2048, parallel: 2, threads: 1, sessionTtlMs: 1_000, log: () => {} });
      try {
        await openaiFor(server).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS }, { headers: { 'x-llamux-conversation': 'idle-one' } });
        expect(server.context.cacheStats().sessions).toBe(1);
        const deadline = Date.now() + 6_000;
        while (server.context.cacheStats().sessions > 0 && Date.now() < deadline) await sleep(100);
        expect(server.context.cacheStats().sessions).toBe(0);
      } finally {
        await server.close();
      }
    });
  });

  describe('a full KV cache', () => {
    it('--ctx 2048 --parallel 4 with 4 × 600-token streams: all four finish (one steps back and resumes)', async () => {
      const server = await createServer({ model: llama, port: 0, ctx: 2048, parallel: 4, threads: 1, log: () => {} });
      try {
        const openai = openaiFor(server);
        const runs = [0, 1, 2, 3].map(async (i) => {
          const stream = await openai.chat.completions.create({
            model: 'x',
            stream: true,
            max_tokens: 600,
            temperature: 0,
            logit_bias: { '2': -100 },
            messages: [{ role: 'user', content: `story number ${i}` }],
            stream_options: { include_usage: true },
          });
          let chunks = 0;
          let finish: string | null | undefined;
          let completion = 0;
          for await (const c of stream) {
            chunks++;
            finish = c.choices[0]?.finish_reason ?? finish;
            if (c.usage) completion = c.usage.completion_tokens;
          }
          return { chunks, finish, completion };
        });
        const results = await Promise.all(runs);
        for (const r of results) {
          expect(r.finish).toBe('length');
          expect(r.completion).toBe(600);
        }
        expect(server.context.cacheStats().preemptions).toBeGreaterThan(0);
      } finally {
        await server.close();
      }
    });
  });

  describe('aborted requests', () => {
    it('counts an aborted request in requests_total (status 499) and logs it once', async () => {
      const lines: string[] = [];
      const server = await createServer({ model: llama, port: 0, ctx: 4096, parallel: 1, threads: 1, log: (_l, m) => lines.push(m) });
      try {
        const ac = new AbortController();
        const stream = await openaiFor(server).chat.completions.create(
          { model: 'x', stream: true, max_tokens: 3000, logit_bias: { '2': -100 }, messages: [{ role: 'user', content: 'abort me' }] },
          { signal: ac.signal },
        );
        const it = stream[Symbol.asyncIterator]();
        await it.next();
        ac.abort();
        const deadline = Date.now() + 10_000;
        while (server.context.pendingRequests > 0 && Date.now() < deadline) await sleep(20);
        await sleep(100);
        const metrics = await (await fetch(`${server.url}/metrics`)).text();
        expect(metricValue(metrics, /^llamux_requests_total\{endpoint="\/v1\/chat\/completions",status="499"\} (\d+)$/gm)).toBe(1);
        expect(lines.filter((l) => /closed the connection/.test(l))).toHaveLength(1);
      } finally {
        await server.close();
      }
    });
  });
});
