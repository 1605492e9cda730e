// --allow-remote-media (issue 37): http(s) image URLs fetched by the server from a local HTTP
// server started here (no internet): redirects bounded, size capped while reading, content type
// checked, a timeout, abortable with the request, and every failure a 400 naming the part. The
// reference for a fetched image is the library's chat prompt with the same bytes.
import { createServer as createHttpServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildChatPromptWithMedia, ChatTemplate, loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { patternPng } from '../helpers/images.js';
import { ensureProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

const MAX_BYTES = 64 * 1024;

describe('--allow-remote-media (zoo qwen3 + a generated gemma3 projector, a local image host)', () => {
  let model: Model;
  let server: LlamuxServer;
  let quick: LlamuxServer;
  let host: Server;
  let base = '';
  const image = patternPng(40, 40, 11);
  // what the image host saw: bytes sent by /endless, whether /hang's connection closed
  let endlessSent = 0;
  let hangClosed: Promise<number> | undefined;
  let hangArrived: () => void = () => {};

  const ask = (url: string, text = 'Describe it.') => ({
    model: 'm',
    max_tokens: 2,
    temperature: 0,
    messages: [{ role: 'user', content: [{ type: 'text', text }, { type: 'image_url', image_url: { url } }] }],
  });
  const post = async (s: LlamuxServer, body: unknown, init: RequestInit = {}) => {
    const r = await fetch(`${s.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...init });
    return { status: r.status, conversation: r.headers.get('x-llamux-conversation') ?? '', json: (await r.json()) as Record<string, any> };
  };

  beforeAll(async () => {
    host = createHttpServer((req, res: ServerResponse) => {
      const path = req.url ?? '/';
      if (path === '/shot.png') {
        res.writeHead(200, { 'content-type': 'image/png', 'content-length': image.length });
        res.end(image);
      } else if (path === '/hop1') {
        res.writeHead(302, { location: '/hop2' }).end();
      } else if (path === '/hop2') {
        res.writeHead(301, { location: `${base}/shot.png` }).end();
      } else if (path === '/loop') {
        res.writeHead(302, { location: '/loop' }).end();
      } else if (path === '/missing.png') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('no such file');
      } else if (path === '/page.html') {
        res.writeHead(200, { 'content-type': 'text/html' }).end('<html>not an image</html>');
      } else if (path === '/declared-big.png') {
        // a length over the cap: refused from the header, nothing read
        res.writeHead(200, { 'content-type': 'image/png', 'content-length': String(MAX_BYTES + 1) });
        res.end(Buffer.alloc(MAX_BYTES + 1));
      } else if (path === '/endless.png') {
        // no length, and a body that never ends: only a cap applied while reading stops it
        res.writeHead(200, { 'content-type': 'image/png' });
        const chunk = Buffer.concat([image, Buffer.alloc(16 * 1024)]).subarray(0, 16 * 1024);
        const pump = (): void => {
          while (!res.destroyed && res.write(chunk)) endlessSent += chunk.length;
          if (!res.destroyed) res.once('drain', pump);
        };
        pump();
      } else if (path === '/hang.png') {
        // headers never come; records when the fetching side gives up the connection
        const opened = Date.now();
        hangClosed = new Promise((resolve) => req.socket.once('close', () => resolve(Date.now() - opened)));
        hangArrived();
      } else {
        res.writeHead(500).end();
      }
    });
    await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(host.address() as AddressInfo).port}`;
    const text = (await zooModels(['qwen3']))['qwen3'];
    const projector = await ensureProjector({ projectionDim: text.nEmbd });
    model = await loadModel(text.path, { projector: projector.path, mediaLimits: { maxBytes: MAX_BYTES } });
    server = await createServer({ model, port: 0, ctx: 1024, parallel: 2, threads: 2, allowRemoteMedia: true, log: () => {} });
    quick = await createServer({ model, port: 0, ctx: 512, parallel: 1, threads: 1, allowRemoteMedia: true, remoteMediaTimeoutMs: 300, log: () => {} });
  });
  afterAll(async () => {
    await server?.close();
    await quick?.close();
    await model?.dispose();
    host?.closeAllConnections();
    await new Promise((resolve) => host?.close(resolve));
  });

  it('fetches the image (redirects followed): the prompt is the library\'s with the same bytes, and the next turn reuses its KV', async () => {
    const want = await buildChatPromptWithMedia(model, [{ role: 'user', content: [{ type: 'text', text: 'Describe it.' }, { type: 'image', image }] }], { template: ChatTemplate.fromModel(model) });
    const first = ask(`${base}/hop1`);
    const a = await post(server, first);
    expect(a.status).toBe(200);
    expect(a.json.usage.prompt_tokens).toBe(want.tokens.length);
    const direct = await post(server, ask(`${base}/shot.png`, 'Describe it again.'));
    expect(direct.status).toBe(200);
    const next = { ...first, messages: [...first.messages, { role: 'assistant', content: a.json.choices[0].message.content }, { role: 'user', content: 'And?' }] };
    const b = await post(server, next, { headers: { 'content-type': 'application/json', 'x-llamux-conversation': a.conversation } });
    expect(b.status).toBe(200);
    expect(b.json.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(want.tokens.length);
  });

  it('each failure is a 400 naming the part; the server goes on', async () => {
    const cases: Array<[string, RegExp]> = [
      [`${base}/missing.png`, /HTTP 404/],
      [`${base}/page.html`, /content type is "text\/html", not an image/],
      [`${base}/loop`, /more than 3 redirects/],
      [`${base}/declared-big.png`, new RegExp(`${MAX_BYTES + 1} bytes pass ${MAX_BYTES}`)],
      ['http://127.0.0.1:1/closed.png', /could not be reached/],
    ];
    for (const [url, why] of cases) {
      const r = await post(server, ask(url));
      expect(r.status, url).toBe(400);
      expect(r.json.error.message).toMatch(/^messages\.0\.content\.1: the image at "http/);
      expect(r.json.error.message).toMatch(why);
      expect(r.json.error.param).toBe('messages.0.content.1.image_url.url');
    }
    // the server goes on
    const ok = await post(server, ask(`${base}/shot.png`, 'Still there?'));
    expect(ok.status).toBe(200);
  });

  it('the size cap holds while reading: an endless body stops near the cap', async () => {
    const t0 = Date.now();
    const r = await post(server, ask(`${base}/endless.png`));
    expect(r.status).toBe(400);
    expect(r.json.error.message).toContain(`the body passes ${MAX_BYTES} bytes`);
    // answered long before the 10 s timeout, and the host was not drained of megabytes
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(endlessSent).toBeLessThan(16 * MAX_BYTES);
  });

  it('a host that never answers: a 400 after the timeout', async () => {
    const r = await post(quick, ask(`${base}/hang.png`));
    expect(r.status).toBe(400);
    expect(r.json.error.message).toContain('no complete answer within 300 ms');
    expect(await hangClosed).toBeLessThan(3000);
  });

  it('a client that leaves stops the fetch', async () => {
    const arrived = new Promise<void>((resolve) => (hangArrived = resolve));
    const ac = new AbortController();
    const req = post(server, ask(`${base}/hang.png`), { signal: ac.signal }).catch((e: unknown) => e);
    await arrived;
    ac.abort();
    await req;
    // the 10 s timeout is far: the connection to the image host closes because the client left
    expect(await hangClosed).toBeLessThan(3000);
    const ok = await post(server, ask(`${base}/shot.png`, 'After the abort?'));
    expect(ok.status).toBe(200);
  });
});
