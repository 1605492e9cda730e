// Server abuse (issue 9): malformed and invalid-UTF-8 bodies, huge bodies, slow and stalled
// clients, an API-key flood, and requests that try to reach files. Every bad request gets a 4xx in
// its SDK's error shape, and after each attack the server still answers a normal request exactly.
// Loopback only.
import { connect, type Socket } from 'node:net';
import { request as httpRequest } from 'node:http';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { tempDir } from '../helpers/paths.js';
import { anthropicFor, openaiFor } from './clients.js';
import { ANSWER, ANTHROPIC_TOOLS, OPENAI_TOOLS, QUESTION, WEATHER_RESULT, ensureChatModels } from './fixtures.js';

const KEY = 'sk-abuse-0123456789';
const LIMIT = 256 * 1024;

interface Reply {
  status: number;
  headers: Headers;
  text: string;
  json: unknown;
}

/** Loopback address of a server URL. */
function hostPort(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port) };
}

/** A raw HTTP/1.1 exchange on a fresh socket: writes `head` (and `body`), reads until the server closes. */
function rawExchange(url: string, head: string, body: Buffer = Buffer.alloc(0), timeoutMs = 10_000): Promise<{ status: number; text: string }> {
  const { host, port } = hostPort(url);
  return new Promise((resolve, reject) => {
    const s = connect(port, host);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`no complete response within ${timeoutMs} ms`));
    }, timeoutMs);
    s.on('data', (c) => chunks.push(c));
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('utf8');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      resolve({ status: m ? Number(m[1]) : 0, text });
    });
    s.write(head);
    if (body.length) s.write(body);
  });
}

function expectOpenAIError(r: Reply, status: number, message?: RegExp): void {
  expect(r.status, r.text).toBe(status);
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
  const body = r.json as { error: { message: string; type: string; param: unknown; code: unknown } };
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(typeof body.error.message).toBe('string');
  for (const k of ['param', 'code'] as const) expect(body.error[k] === null || typeof body.error[k] === 'string').toBe(true);
  expect(['invalid_request_error', 'server_error']).toContain(body.error.type);
  if (status < 500) expect(body.error.type).toBe('invalid_request_error');
  if (message) expect(body.error.message).toMatch(message);
}

function expectAnthropicError(r: Reply, status: number, type: string, message?: RegExp): void {
  expect(r.status, r.text).toBe(status);
  const body = r.json as { type: string; error: { type: string; message: string } };
  expect(body).toEqual({ type: 'error', error: { type, message: expect.any(String) } });
  if (message) expect(body.error.message).toMatch(message);
}

describe('server abuse', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  let storeDir: string;

  const send = async (path: string, body: string | Buffer | undefined, headers: Record<string, string> = {}, method = 'POST'): Promise<Reply> => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      ...(body !== undefined ? { body } : {}),
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers },
    });
    const text = await res.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, headers: res.headers, text, json };
  };

  /** A normal first turn: the scripted model calls get_weather for Paris. */
  async function normalTurn(client = openai): Promise<void> {
    const r = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS });
    const call = r.choices[0]!.message.tool_calls?.[0];
    expect(call?.type === 'function' ? call.function : undefined).toEqual({ name: 'get_weather', arguments: '{"city":"Paris"}' });
  }

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    storeDir = tempDir('abuse-store');
    server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1, apiKey: KEY, maxBodyBytes: LIMIT, storePath: join(storeDir, 'tool-calls.sqlite') });
    expect(['127.0.0.1', '::1']).toContain(server.host);
    openai = openaiFor(server, KEY);
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
    if (storeDir) rmSync(storeDir, { recursive: true, force: true });
  });
  // After every attack: still serving, nothing left running.
  afterEach(async () => {
    await normalTurn();
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    const deadline = Date.now() + 10_000;
    while (server.context.pendingRequests > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(server.context.pendingRequests).toBe(0);
  });

  it('answers 400 in the SDK shape to malformed JSON and to JSON that is not an object', async () => {
    const deep = `${'['.repeat(120_000)}${']'.repeat(120_000)}`;
    const malformed = [
      '{',
      '{"model": ',
      '{"model":"x",}',
      "{'model':'x'}",
      '{"model":"x","messages":[{"role":"user","content":"hi"}]} trailing',
      '{"a":1}{"b":2}',
      'NaN',
      '\u0000\u0001\u0002',
      `{"model":"x","messages":${'['.repeat(100_000)}`,
      '   ',
    ];
    for (const body of malformed) {
      expectOpenAIError(await send('/v1/chat/completions', body), 400);
      expectAnthropicError(await send('/v1/messages', body), 400, 'invalid_request_error');
      expectAnthropicError(await send('/v1/messages/count_tokens', body), 400, 'invalid_request_error');
    }
    for (const body of ['null', '42', '"a string"', 'true', '[]', '[{"model":"x"}]', '{}']) {
      expectOpenAIError(await send('/v1/chat/completions', body), 400, /Invalid request body/);
      expectAnthropicError(await send('/v1/messages', body), 400, 'invalid_request_error', /Invalid request body/);
    }
    // JSON nested past the bound is refused before anything walks it
    expectOpenAIError(await send('/v1/chat/completions', deep), 400, /deeper than 256 levels/);
    expectAnthropicError(await send('/v1/messages', deep), 400, 'invalid_request_error', /deeper than 256 levels/);
    // Bodies that parse but are hostile to what comes after parsing.
    const deepParams = JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'function', function: { name: 'f', parameters: { a: 0 } } }] }).replace('"a":0', `"a":${deep.slice(0, 40_000)}${deep.slice(-40_000)}`);
    expectOpenAIError(await send('/v1/chat/completions', deepParams), 400);
    const args = JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: `${'['.repeat(50_000)}${']'.repeat(50_000)}` } }] }, { role: 'tool', tool_call_id: 'call_1', content: 'ok' }] });
    const r = await send('/v1/chat/completions', args);
    expect(r.status, r.text).toBeLessThan(500);
  });

  it('survives bodies that are not valid UTF-8 (the server keeps serving)', async () => {
    const bad = [Buffer.from([0xff]), Buffer.from([0xc3]), Buffer.from([0x80, 0x80]), Buffer.from([0xc0, 0xaf]), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80])];
    for (const b of bad) {
      const body = Buffer.concat([Buffer.from(`{"model":"x","max_tokens":4,"messages":[{"role":"user","content":"`), b, Buffer.from('"}]}')]);
      for (const path of ['/v1/chat/completions', '/v1/messages']) {
        const r = await send(path, body);
        expect(r.status, r.text).toBeLessThan(500);
      }
      // Invalid bytes outside strings are a JSON error.
      const outside = Buffer.concat([Buffer.from('{"model":"x",'), b, Buffer.from('"max_tokens":4}')]);
      expectOpenAIError(await send('/v1/chat/completions', outside), 400);
    }
  });

  it('rejects bodies that are not valid UTF-8 with 400 instead of silently replacing bytes', async () => {
    // JSON text exchanged between systems must be UTF-8 (RFC 8259 §8.1). Decoding leniently turns
    // the bytes into U+FFFD: the model then sees a prompt the client never sent.
    const bad = [Buffer.from([0xff, 0xfe]), Buffer.from([0xc3]), Buffer.from([0xc0, 0xaf]), Buffer.from([0xed, 0xa0, 0x80])];
    for (const b of bad) {
      const openaiBody = Buffer.concat([Buffer.from(`{"model":"x","max_tokens":4,"messages":[{"role":"user","content":"hi `), b, Buffer.from('"}]}')]);
      expectOpenAIError(await send('/v1/chat/completions', openaiBody), 400, /UTF-8/);
      const anthropicBody = Buffer.concat([Buffer.from(`{"model":"x","max_tokens":4,"messages":[{"role":"user","content":"hi `), b, Buffer.from('"}]}')]);
      expectAnthropicError(await send('/v1/messages', anthropicBody), 400, 'invalid_request_error', /UTF-8/);
    }
  });

  it('answers 413 to a declared huge body at once and closes the connection', async () => {
    const { host, port } = hostPort(server.url);
    for (const [path, anthropic] of [['/v1/chat/completions', false], ['/v1/messages', true]] as const) {
      const declared = 64 * 1024 * 1024;
      const started = Date.now();
      const reply = await new Promise<{ status: number; body: string; connection?: string; sent: number }>((resolve, reject) => {
        const req = httpRequest({ host, port, path, method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'content-length': String(declared) } });
        let sent = 0;
        let done = false;
        req.on('response', (res) => {
          done = true;
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), ...(res.headers.connection ? { connection: res.headers.connection } : {}), sent }));
          res.on('error', reject);
        });
        req.on('error', () => {}); // EPIPE once the server closes: expected
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        const pump = (): void => {
          while (!done && sent < declared) {
            sent += chunk.length;
            if (!req.write(chunk)) {
              req.once('drain', pump);
              return;
            }
          }
        };
        pump();
      });
      expect(reply.status).toBe(413);
      expect(reply.connection).toBe('close');
      expect(reply.sent).toBeLessThan(declared);
      expect(Date.now() - started).toBeLessThan(5_000);
      const json = JSON.parse(reply.body) as unknown;
      if (anthropic) expect(json).toEqual({ type: 'error', error: { type: 'request_too_large', message: `The request body exceeds the limit of ${LIMIT} bytes` } });
      else expect(json).toMatchObject({ error: { type: 'invalid_request_error', code: 'request_too_large' } });
    }
  });

  it('accepts a body of exactly maxBodyBytes and answers 413 to one byte more', async () => {
    const base = JSON.stringify({ model: 'x', max_tokens: 2, messages: [{ role: 'user', content: QUESTION }] });
    const exact = base + ' '.repeat(LIMIT - Buffer.byteLength(base));
    expect(Buffer.byteLength(exact)).toBe(LIMIT);
    const ok = await send('/v1/chat/completions', exact);
    expect(ok.status, ok.text).toBe(200);
    expectOpenAIError(await send('/v1/chat/completions', `${exact} `), 413, /exceeds the limit/);
  });

  it('answers 413 to a streamed (chunked) body as soon as it passes the limit, without reading the rest', async () => {
    // A client that never stops sending must not keep the server reading: the 413 should come
    // once the limit is passed, not when the client is done (here, after 64 MiB).
    const { host, port } = hostPort(server.url);
    const cap = 64 * 1024 * 1024;
    const reply = await new Promise<{ status: number; sentBeforeResponse: number; sentAll: boolean }>((resolve) => {
      const req = httpRequest({ host, port, path: '/v1/chat/completions', method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' } });
      let sent = 0;
      let done = false;
      let sentAll = false;
      req.on('response', (res) => {
        if (done) return;
        done = true;
        const sentBeforeResponse = sent;
        res.resume();
        req.destroy();
        resolve({ status: res.statusCode ?? 0, sentBeforeResponse, sentAll });
      });
      req.on('error', () => {
        if (!done) {
          done = true;
          resolve({ status: 0, sentBeforeResponse: sent, sentAll });
        }
      });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = (): void => {
        while (!done && sent < cap) {
          sent += chunk.length;
          if (!req.write(chunk)) {
            req.once('drain', pump);
            return;
          }
        }
        if (!done && !sentAll) {
          sentAll = true;
          req.end();
        }
      };
      pump();
    });
    expect(reply.status).toBe(413);
    expect(reply.sentAll, `the server answered only after the client had sent all ${cap} bytes`).toBe(false);
    expect(reply.sentBeforeResponse).toBeLessThan(16 * LIMIT);
  });

  it('keeps serving while a client dribbles its body and while many clients stall', async () => {
    const { host, port } = hostPort(server.url);
    const body = Buffer.from(JSON.stringify({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS }));
    // 1. A client that sends headers, then its body a few bytes every 25 ms.
    const dribbler = new Promise<{ status: number; text: string }>((resolve, reject) => {
      const s = connect(port, host);
      const chunks: Buffer[] = [];
      s.on('data', (c) => chunks.push(c));
      s.on('error', reject);
      s.on('close', () => {
        const text = Buffer.concat(chunks).toString();
        resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text });
      });
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`);
      let off = 0;
      const step = Math.ceil(body.length / 60);
      const tick = setInterval(() => {
        s.write(body.subarray(off, off + step));
        off += step;
        if (off >= body.length) clearInterval(tick);
      }, 25);
    });
    // 2. Clients that stall: 60 that sent headers and half a body, 20 that sent half their headers.
    const stalled: Socket[] = [];
    for (let i = 0; i < 60; i++) {
      const s = connect(port, host);
      s.on('error', () => {});
      s.write(`POST /v1/${i % 2 ? 'messages' : 'chat/completions'} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":"x","mess`);
      stalled.push(s);
    }
    for (let i = 0; i < 20; i++) {
      const s = connect(port, host);
      s.on('error', () => {});
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nX-Slow-${i}: `);
      stalled.push(s);
    }
    await new Promise((r) => setTimeout(r, 100));
    // Normal requests are answered promptly meanwhile.
    const anthropic = anthropicFor(server, KEY);
    for (let i = 0; i < 6; i++) {
      const t = Date.now();
      await normalTurn();
      const m = await anthropic.messages.create({ model: 'claude', max_tokens: 64, messages: [{ role: 'user', content: QUESTION }], tools: ANTHROPIC_TOOLS });
      expect(m.content.find((b) => b.type === 'tool_use')).toMatchObject({ name: 'get_weather', input: { city: 'Paris' } });
      expect(Date.now() - t).toBeLessThan(3_000);
    }
    const d = await dribbler;
    expect(d.status, d.text.slice(0, 300)).toBe(200);
    expect(d.text).toContain('"get_weather"');
    for (const s of stalled) s.destroy();
  });

  it('finishes the generations of streaming clients that never read their responses', async () => {
    const { host, port } = hostPort(server.url);
    const body = JSON.stringify({ model: 'x', stream: true, messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS });
    const readers: Socket[] = [];
    for (let i = 0; i < 12; i++) {
      const s = connect(port, host);
      s.on('error', () => {});
      s.pause(); // never reads
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      readers.push(s);
    }
    await new Promise((r) => setTimeout(r, 200));
    await normalTurn();
    const deadline = Date.now() + 10_000;
    while (server.context.pendingRequests > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(server.context.pendingRequests).toBe(0);
    for (const s of readers) s.destroy();
  });

  it('answers 401 to 1,000 requests with a wrong or missing API key and keeps serving', async () => {
    const wrong: Array<{ path: string; method: string; headers: Record<string, string>; body?: string; anthropic: boolean }> = [];
    const keys: Array<Record<string, string>> = [
      { authorization: 'Bearer sk-wrong' },
      { authorization: `Bearer ${KEY}x` },
      { authorization: `Bearer ${KEY.slice(0, -1)}` },
      { authorization: `Basic ${Buffer.from(`user:${KEY}`).toString('base64')}` },
      { authorization: KEY },
      { 'x-api-key': 'sk-wrong' },
      { 'x-api-key': `${KEY} ` + 'A'.repeat(8000) },
      {},
      { authorization: 'Bearer ' },
      { authorization: `Bearer ${KEY.toUpperCase()}` },
    ];
    const targets = [
      { path: '/v1/chat/completions', method: 'POST', anthropic: false, body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: QUESTION }] }) },
      { path: '/v1/messages', method: 'POST', anthropic: true, body: JSON.stringify({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: QUESTION }] }) },
      { path: '/v1/messages/count_tokens', method: 'POST', anthropic: true, body: '{"model":"x","messages":[]}' },
      { path: '/v1/models', method: 'GET', anthropic: false },
      { path: '/metrics', method: 'GET', anthropic: false },
    ];
    for (let i = 0; i < 1000; i++) {
      const t = targets[i % targets.length]!;
      wrong.push({ ...t, headers: { ...keys[Math.floor(i / targets.length) % keys.length]! } });
    }
    const started = Date.now();
    let served = 0;
    for (let i = 0; i < wrong.length; i += 50) {
      const batch = wrong.slice(i, i + 50).map(async (w) => {
        const res = await fetch(`${server.url}${w.path}`, { method: w.method, headers: { 'content-type': 'application/json', ...w.headers }, ...(w.body ? { body: w.body } : {}) });
        const json = (await res.json()) as Record<string, unknown>;
        expect(res.status).toBe(401);
        if (w.anthropic) expect(json).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
        else expect(json).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_api_key' } });
      });
      await Promise.all(batch);
      // A legitimate client is served in the middle of the flood.
      if (i % 250 === 0) {
        await normalTurn();
        served++;
      }
    }
    const ms = Date.now() - started;
    console.log(`1000 wrong-key requests in ${ms} ms (${served} normal requests served during the flood)`);
    const metrics = await (await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
    const total401 = [...metrics.matchAll(/^llamux_requests_total\{[^}]*status="401"[^}]*\} (\d+)$/gm)].reduce((a, m) => a + Number(m[1]), 0);
    expect(total401).toBeGreaterThanOrEqual(1000);
  });

  it('never reads files a request names: model paths are only echoed, file fields are unknown fields (400)', async () => {
    const auth = { authorization: `Bearer ${KEY}` };
    for (const name of ['/etc/passwd', '../../../../../../etc/passwd', 'file:///etc/passwd', '~/.ssh/id_rsa', server.model.path, '..\\..\\windows\\win.ini']) {
      const r = await openai.chat.completions.create({ model: name, messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS });
      expect(r.model).toBe(name); // echoed, never opened
      expect(r.system_fingerprint).toBe(`llamux-${server.model.metadata.fingerprint.slice(0, 12)}`);
      expect(JSON.stringify(r)).not.toMatch(/root:.*:0:0:/);
      const a = await send('/v1/messages', JSON.stringify({ model: name, max_tokens: 64, messages: [{ role: 'user', content: QUESTION }], tools: ANTHROPIC_TOOLS }));
      expect(a.status).toBe(200);
      expect((a.json as { model: string }).model).toBe(name);
    }
    for (const field of ['chat_template', 'chat_template_kwargs', 'template', 'model_path', 'grammar_file', 'lora', 'slot_save_path', 'prompt_file', 'system_prompt_file']) {
      const o = await send('/v1/chat/completions', JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], [field]: '/etc/passwd' }));
      // chat_template_kwargs is an OpenAI-side field (#25), but only an object of template variables,
      // and lora llama-server's list of adapter ids and scales (#38): a path is still a 400.
      expectOpenAIError(o, 400, new RegExp(field === 'chat_template_kwargs' || field === 'lora' ? field : `unknown field "${field}"`));
      const a = await send('/v1/messages', JSON.stringify({ model: 'x', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }], [field]: '/etc/passwd' }));
      expectAnthropicError(a, 400, 'invalid_request_error', new RegExp(`unknown field "${field}"`));
    }
    // Content that points at files.
    expectOpenAIError(await send('/v1/chat/completions', JSON.stringify({ model: 'x', messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: '../../etc/passwd' } }] }] })), 400, /not supported/);
    expectOpenAIError(await send('/v1/chat/completions', JSON.stringify({ model: 'x', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'file:///etc/passwd' } }] }] })), 400, /not supported/);
    expectAnthropicError(await send('/v1/messages', JSON.stringify({ model: 'x', max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'url', url: 'file:///etc/passwd' } }] }] })), 400, 'invalid_request_error', /not supported/);
    // A conversation header that looks like a path.
    expectOpenAIError(await send('/v1/chat/completions', JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }), { 'x-llamux-conversation': '../../etc/passwd' }), 400, /x-llamux-conversation/);
    expectAnthropicError(await send('/v1/messages', JSON.stringify({ model: 'x', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }), { 'x-llamux-conversation': '/etc/passwd' }), 400, 'invalid_request_error', /x-llamux-conversation/);
    // Model ids in the path are echoed too.
    const m = await send('/v1/models/..%2F..%2F..%2Fetc%2Fpasswd', undefined, auth, 'GET');
    expect(m.status).toBe(200);
    expect(m.json).toMatchObject({ id: '../../../etc/passwd' });
  });

  it('treats tool-call ids with "../" as opaque ids: rendered, never a path', async () => {
    const before = readdirSync(storeDir).sort();
    for (const id of ['../../../../tmp/llamux-abuse', '/etc/passwd', '..', 'call_../../x', `${'../'.repeat(80)}x`]) {
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
      const a = await anthropicFor(server, KEY).messages.create({
        model: 'x',
        max_tokens: 64,
        messages: [
          { role: 'user', content: QUESTION },
          { role: 'assistant', content: [{ type: 'tool_use', id, name: 'get_weather', input: { city: 'Paris' } }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: WEATHER_RESULT }] },
        ],
        tools: ANTHROPIC_TOOLS,
      });
      expect(a.content).toEqual([{ type: 'text', text: ANSWER }]);
    }
    // The store folder holds the same SQLite files, nothing named after an id.
    const after = readdirSync(storeDir).sort();
    expect(after).toEqual(before);
    expect(after.every((f) => f.startsWith('tool-calls.sqlite'))).toBe(true);
  });

  it('answers 404 to request targets that traverse out of the API (raw request lines)', async () => {
    const targets = ['/../../../../etc/passwd', '/v1/../../../etc/passwd', '/%2e%2e/%2e%2e/etc/passwd', '//etc/passwd', '/v1/chat/completions/../../../../etc/passwd', 'http://127.0.0.1/etc/passwd', '/v1/models/../../../etc/passwd?x=1'];
    for (const t of targets) {
      const r = await rawExchange(server.url, `GET ${t} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`);
      expect(r.text).not.toMatch(/root:.*:0:0:/);
      if (t.startsWith('/v1/models/')) {
        expect(r.status).toBe(200); // any model id is served by the loaded model
        expect(r.text).toContain('"id":"../../../etc/passwd"');
      } else {
        expect(r.status, `${t}: ${r.text.slice(0, 200)}`).toBe(404);
        expect(r.text).toContain('"invalid_request_error"');
      }
    }
  });

  it('answers malformed HTTP (garbage request line, oversized or broken headers, bad lengths) with 4xx', async () => {
    const cases: Array<[string, string]> = [
      ['GARBAGE\r\n\r\n', '400'],
      ['GET / HTTP/9.9\r\nHost: localhost\r\n\r\n', '4'],
      [`GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, '431'],
      [`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: abc\r\n\r\n{}`, '400'],
      [`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}`, '400'],
      [`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`, '400'],
      [`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`, '4'],
    ];
    for (const [head, status] of cases) {
      const r = await rawExchange(server.url, head);
      expect(String(r.status), `${JSON.stringify(head.slice(0, 60))}: ${r.text.slice(0, 120)}`).toMatch(new RegExp(`^${status}`));
    }
  });

  it('does not block other requests while it builds a prompt of 15,000 messages (default body limit)', async () => {
    // A 465 KB body, under the default 4 MiB limit. Rendering and tokenizing it runs on the event
    // loop, and llama.cpp's special-token partition makes the tokenization quadratic in the
    // number of control tokens. The server shares this process's event loop, so the longest gap
    // between ticks of a 10 ms timer is how long every other client waited.
    const wide = await createServer({ model, port: 0, ctx: 8192, parallel: 1, threads: 1 });
    try {
      const body = JSON.stringify({ model: 'x', max_tokens: 2, messages: Array.from({ length: 15_000 }, () => ({ role: 'user', content: 'hi' })) });
      expect(Buffer.byteLength(body)).toBeLessThan(4 * 1024 * 1024);
      let last = Date.now();
      let maxGap = 0;
      const ticker = setInterval(() => {
        const now = Date.now();
        maxGap = Math.max(maxGap, now - last);
        last = now;
      }, 10);
      const started = Date.now();
      const res = await fetch(`${wide.url}/v1/chat/completions`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
      const text = await res.text();
      const health = await fetch(`${wide.url}/health`);
      clearInterval(ticker);
      console.log(`15,000-message request: answered after ${Date.now() - started} ms with ${res.status}; the event loop stood still for up to ${maxGap} ms`);
      expect(res.status, text).toBe(400); // longer than the context
      expect(text).toMatch(/context_length_exceeded/);
      expect(health.status).toBe(200);
      expect(maxGap, `every other request waited up to ${maxGap} ms behind this one`).toBeLessThan(1_000);
    } finally {
      await wide.close();
    }
  });

  it('closes promptly while clients stall', async () => {
    const other = await createServer({ model, port: 0, ctx: 1024, parallel: 1, threads: 1 });
    const { host, port } = hostPort(other.url);
    const sockets: Socket[] = [];
    for (let i = 0; i < 30; i++) {
      const s = connect(port, host);
      s.on('error', () => {});
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 500\r\n\r\n{"mo`);
      sockets.push(s);
    }
    await new Promise((r) => setTimeout(r, 100));
    const t = Date.now();
    await other.close();
    expect(Date.now() - t).toBeLessThan(5_000);
    for (const s of sockets) s.destroy();
  });
});
