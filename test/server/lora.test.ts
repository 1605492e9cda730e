// The server's LoRA adapters (llama-server's shape): --lora at start, GET/POST /lora-adapters,
// the per-request `lora` field. The model and adapter are test/helpers/lora.ts's: with the
// adapter at scale 1 prompt A continues with script B's text; at 0.25 or 0 with A's own.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeGguf } from '../../src/gguf/writer.js';
import { takeLoraScaled } from '../../src/cli/args.js';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { A, adapterGguf, B, built } from '../helpers/lora.js';

let dir: string;
let model: Model;
let server: LlamuxServer;

const post = async (path: string, body: unknown) => {
  const r = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
};
const complete = async (extra: Record<string, unknown>) => {
  const r = await post('/v1/completions', { model: 'm', prompt: [...A.promptTokens], max_tokens: 8, temperature: 0, ...extra });
  expect(r.status).toBe(200);
  return (r.body.choices as Array<{ text: string }>)[0]!.text;
};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'llamux-lora-server-'));
  writeFileSync(join(dir, 'model.gguf'), encodeGguf(built.gguf));
  writeFileSync(join(dir, 'deep.gguf'), adapterGguf());
  model = await loadModel(join(dir, 'model.gguf'));
  server = await createServer({ model, port: 0, ctx: 1024, parallel: 2, threads: 1, lora: [join(dir, 'deep.gguf')] });
});
afterAll(async () => {
  await server?.close();
  await model?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe('LoRA adapters on the server', () => {
  it('lists its adapters, applies them by default and per request, and takes new default scales', async () => {
    const list = await fetch(`${server.url}/lora-adapters`);
    expect(await list.json()).toEqual([{ id: 0, path: join(dir, 'deep.gguf'), scale: 1 }]);
    expect(await complete({})).toBe(B.greedyText);
    expect(await complete({ lora: [] })).toBe(A.greedyText);
    expect(await complete({ lora: [{ id: 0, scale: 0.25 }] })).toBe(A.greedyText);
    expect(await complete({ lora: [{ id: 0, scale: 1 }] })).toBe(B.greedyText);
    const set = await post('/lora-adapters', [{ id: 0, scale: 0 }]);
    expect(set).toEqual({ status: 200, body: [{ id: 0, path: join(dir, 'deep.gguf'), scale: 0 }] });
    expect(await complete({})).toBe(A.greedyText);
    await post('/lora-adapters', [{ id: 0, scale: 1 }]);
    expect(await complete({})).toBe(B.greedyText);
  });

  it('refuses unknown or repeated ids and malformed entries with 400', async () => {
    for (const lora of [[{ id: 1, scale: 1 }], [{ id: 0, scale: 1 }, { id: 0, scale: 2 }], [{ id: 0 }], [{ id: -1, scale: 1 }], { id: 0 }]) {
      const r = await post('/v1/completions', { model: 'm', prompt: 'x', max_tokens: 1, lora });
      expect(r.status).toBe(400);
      expect((r.body.error as { type: string }).type).toBe('invalid_request_error');
    }
    expect((await post('/lora-adapters', [{ id: 3, scale: 1 }])).status).toBe(400);
    expect(await complete({})).toBe(B.greedyText);
  });

  it('reads --lora-scaled PATH SCALE pairs', () => {
    expect(takeLoraScaled(['--model', 'm.gguf', '--lora-scaled', 'a.gguf', '0.5', '--lora', 'b.gguf'])).toEqual({
      rest: ['--model', 'm.gguf', '--lora', 'b.gguf'],
      scaled: [{ path: 'a.gguf', scale: 0.5 }],
    });
    expect(() => takeLoraScaled(['--lora-scaled', 'a.gguf'])).toThrow('--lora-scaled expects PATH SCALE');
    expect(() => takeLoraScaled(['--lora-scaled', 'a.gguf', 'x'])).toThrow('--lora-scaled expects PATH SCALE');
  });
});
