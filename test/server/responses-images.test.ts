// /v1/responses `input_image` parts (issue 37) through the official openai client, on the zoo's
// qwen3 model with a generated gemma3 projector: the prompt is the library's with the same image,
// a previous_response_id chain replays the image from the store and reuses its KV, a remote
// image (--allow-remote-media) is stored as its bytes so the chain survives the host and a
// restart, and bad images are a 400 naming the part. Expected counts come from the library's
// chat prompt (buildChatPromptWithMedia) and the projector's description, never from the server.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildChatPromptWithMedia, ChatTemplate, loadModel, type ChatMessage, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { patternPng } from '../helpers/images.js';
import { ensureProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';
import { openaiFor } from './clients.js';

describe('/v1/responses input_image (zoo qwen3 + a generated gemma3 projector)', () => {
  let model: Model;
  let server: LlamuxServer;
  let strict: LlamuxServer;
  let openai: OpenAI;
  let host: Server;
  let base = '';
  let hostServes = true;
  let tokensPerImage = 0;
  const dir = mkdtempSync(join(tmpdir(), 'llamux-resp-img-'));
  const storePath = join(dir, 'store.db');
  const image = patternPng(40, 40, 21);
  const remoteImage = patternPng(40, 40, 22);
  const dataUrl = `data:image/png;base64,${image.toString('base64')}`;
  const QUESTION = 'What is on the screen?';

  /** The library's prompt length for these messages (the reference). */
  const promptLength = async (messages: ChatMessage[]) => (await buildChatPromptWithMedia(model, messages, { template: ChatTemplate.fromModel(model) })).tokens.length;
  const withImage = (bytes: Buffer, text = QUESTION): ChatMessage[] => [{ role: 'user', content: [{ type: 'text', text }, { type: 'image', image: bytes }] }];
  const imageInput = (url: string, text = QUESTION): OpenAI.Responses.ResponseInput => [
    { role: 'user', content: [{ type: 'input_text', text }, { type: 'input_image', image_url: url, detail: 'low' }] },
  ];
  const create = (client: OpenAI, body: Omit<OpenAI.Responses.ResponseCreateParamsNonStreaming, 'model'>) =>
    client.responses.create({ model: 'm', temperature: 0, max_output_tokens: 3, ...body });

  beforeAll(async () => {
    host = createHttpServer((req, res) => {
      if (req.url === '/screen.png' && hostServes) res.writeHead(200, { 'content-type': 'image/png' }).end(remoteImage);
      else res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(host.address() as AddressInfo).port}`;
    const text = (await zooModels(['qwen3']))['qwen3'];
    const projector = await ensureProjector({ projectionDim: text.nEmbd });
    tokensPerImage = projector.tokensPerImage;
    model = await loadModel(text.path, { projector: projector.path });
    server = await createServer({ model, port: 0, ctx: 2048, parallel: 2, threads: 2, storePath, allowRemoteMedia: true, log: () => {} });
    strict = await createServer({ model, port: 0, ctx: 512, parallel: 1, threads: 1, log: () => {} });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server?.close();
    await strict?.close();
    await model?.dispose();
    await new Promise((resolve) => host?.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  it('an input_image (data: URL) is read, listed, and replayed by previous_response_id with its KV reused', async () => {
    const want1 = await promptLength(withImage(image));
    // the reference holds the image: its run of embeddings, besides the text
    expect(want1 - (await promptLength([{ role: 'user', content: QUESTION }]))).toBeGreaterThanOrEqual(tokensPerImage);
    const r1 = await create(openai, { input: imageInput(dataUrl) });
    expect(r1.status).not.toBe('failed');
    expect(r1.usage!.input_tokens).toBe(want1);

    const items = await openai.responses.inputItems.list(r1.id);
    const stored = items.data[0] as OpenAI.Responses.ResponseInputMessageItem;
    expect(stored.content[1]).toEqual({ type: 'input_image', image_url: dataUrl, detail: 'low' });

    const r2 = await create(openai, { previous_response_id: r1.id, input: 'And what changed?' });
    // the whole first prompt, the image's embeddings included, comes from the conversation's KV
    expect(r2.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(want1);
    expect(r2.usage!.input_tokens).toBeGreaterThan(want1);
  });

  it('a remote image (--allow-remote-media) is stored as its bytes: the chain goes on when the host is gone, and after a restart', async () => {
    const want1 = await promptLength(withImage(remoteImage));
    hostServes = true;
    const r1 = await create(openai, { input: imageInput(`${base}/screen.png`) });
    expect(r1.usage!.input_tokens).toBe(want1);
    const items = await openai.responses.inputItems.list(r1.id);
    expect((items.data[0] as OpenAI.Responses.ResponseInputMessageItem).content[1]).toEqual({ type: 'input_image', image_url: `data:image/png;base64,${remoteImage.toString('base64')}`, detail: 'low' });

    hostServes = false;
    const r2 = await create(openai, { previous_response_id: r1.id, input: 'Next?' });
    expect(r2.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(want1);

    // a new server on the same store file: no KV, but the image comes back from the store
    const again = await createServer({ model, port: 0, ctx: 1024, parallel: 1, threads: 2, storePath, log: () => {} });
    try {
      const r2b = await create(openaiFor(again), { previous_response_id: r1.id, input: 'Next?' });
      expect(r2b.usage!.input_tokens).toBe(r2.usage!.input_tokens);
      expect(r2b.usage!.input_tokens_details.cached_tokens).toBe(0);
    } finally {
      await again.close();
    }
  });

  it('bad images are a 400 naming the part; remote URLs are refused without the flag', async () => {
    const fails = async (client: OpenAI, body: Omit<OpenAI.Responses.ResponseCreateParamsNonStreaming, 'model'>, message: RegExp) => {
      const e = await create(client, body).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(e).toBeInstanceOf(OpenAI.APIError);
      expect((e as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
      expect((e as Error).message).toMatch(message);
    };
    // a truncated file passes the header checks; libmtmd's decode names the chat message's part
    await fails(openai, { input: imageInput(`data:image/png;base64,${image.subarray(0, 40).toString('base64')}`) }, /content\[1\] \(image\)/);
    await fails(openai, { input: imageInput('data:image/png;base64,@@@') }, /input\[0\]\.content\[1\]: the data: URL is not valid base64/);
    await fails(openai, { input: imageInput(`${base}/missing.png`) }, /input\[0\]\.content\[1\]: the image at .* HTTP 404/);
    await fails(openaiFor(strict), { input: imageInput(`${base}/screen.png`) }, /input\[0\]\.content\[1\]: remote image URLs are not fetched/);
    await fails(
      openai,
      { input: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: [{ type: 'input_image', image_url: dataUrl, detail: 'auto' }] } as never] },
      /input\[1\]\.content\[0\]: input_image parts belong in user messages/,
    );
    await fails(openai, { input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-1', detail: 'auto' }] }] }, /input\[0\]\.content\[0\]: input_image needs an image_url.*file_id is not served/);
    // the server goes on
    const ok = await create(openai, { input: imageInput(dataUrl, 'Still fine?') });
    expect(ok.status).not.toBe('failed');
  });
});
