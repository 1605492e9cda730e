// The correctness suite's `--url` mode judges a server by its replies alone. Three small HTTP
// servers answer as a correct server, as one whose cache hands a reply of another conversation,
// and as one whose cached answers differ from its cold ones; the verdicts must say which is which.
// (The suite run on llamux and llama-server themselves is test/bench/agents.test.ts, slow list.)
import { createServer, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { markerWordsIn } from '../../bench/echo-model.js';
import { runCorrectnessBench } from '../../bench/workloads/correctness.js';

type Answer = (marker: string[], body: Record<string, unknown>) => string;

/** An OpenAI-shaped server whose reply text is `answer(the request's marker words, body)`. */
function fakeServer(answer: Answer): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    let raw = '';
    req.on('data', (d: Buffer) => (raw += d.toString()));
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      if (req.url === '/v1/models') return res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake-model', object: 'model' }] }));
      const body = JSON.parse(raw) as { model: string; messages: Array<{ role: string; content: string }> };
      const marker = markerWordsIn(body.messages.find((m) => m.role === 'user')!.content);
      res.end(JSON.stringify({
        object: 'chat.completion',
        model: body.model,
        choices: [{ index: 0, message: { role: 'assistant', content: answer(marker, body) }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 100, completion_tokens: 4, total_tokens: 104, prompt_tokens_details: { cached_tokens: 0 } },
      }));
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server })));
}

let running: Server | undefined;
afterEach(async () => {
  await new Promise<void>((r) => (running ? running.close(() => r()) : r()));
  running = undefined;
});

async function judge(answer: Answer) {
  const { url, server } = await fakeServer(answer);
  running = server;
  return runCorrectnessBench({ quick: true, url: `${url}/v1` });
}

const row = (text: string, check: string) => text.split('\n').find((l) => l.startsWith(`| ${check}`)) ?? '';

describe('correctness --url', () => {
  it('passes a server that answers each conversation with its own marker', { timeout: 30_000 }, async () => {
    const r = await judge((marker) => marker.join(' '));
    expect(r.failed, r.text).toBe(false);
    expect(r.text).toContain('model "fake-model"');
    expect(row(r.text, 'every reply carries its own marker')).toMatch(/\| pass \(16\/16\)/);
    expect(row(r.text, "no reply shows another conversation's marker")).toMatch(/\| pass \(0 of 16\)/);
    expect(row(r.text, 'cached answer = cold answer')).toMatch(/\| pass \(16\/16\)/);
  });

  it("fails a server that hands one conversation another's reply", { timeout: 30_000 }, async () => {
    // a cache keyed by something the conversations share: each request gets the previous request's reply
    let previous = 'amber';
    const r = await judge((marker) => {
      const out = previous;
      previous = marker.join(' ');
      return out;
    });
    expect(r.failed).toBe(true);
    expect(row(r.text, 'every reply carries its own marker')).toMatch(/\| FAIL \(\d+ of 16 wrong/);
    expect(row(r.text, "no reply shows another conversation's marker")).toMatch(/\| FAIL \(\d+: \d+:\d+ shows conversation \d+'s marker/);
  });

  it('fails a server whose cached answers differ from its cold ones', { timeout: 30_000 }, async () => {
    // right marker, but the cached path (no cache_prompt: false) words it differently
    const r = await judge((marker, body) => (body.cache_prompt === false ? marker.join(' ') : `${marker.join(' ')}.`));
    expect(r.failed).toBe(true);
    expect(row(r.text, 'every reply carries its own marker')).toMatch(/\| pass/);
    expect(row(r.text, 'cached answer = cold answer')).toMatch(/\| FAIL \(16 differ/);
  });
});
