// Speculative decoding in the HTTP server (issue 27): `speculative: 'ngram'` (the CLI's --spec
// ngram), the per-request opt-out, the predicted-output counters in usage and the /metrics
// counters, and the CLI's usage errors.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { ANSWER, QUESTION, WEATHER_RESULT, ensureChatModels } from '../server/fixtures.js';
import { projectRoot } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

interface Completion {
  choices: Array<{ message: { content: string | null }; finish_reason: string }>;
  usage: { completion_tokens: number; completion_tokens_details?: { accepted_prediction_tokens: number; rejected_prediction_tokens: number } };
}

describe('llamux server with speculative: ngram', () => {
  let model: Model;
  let server: LlamuxServer;

  beforeAll(async () => {
    model = await loadModel((await ensureChatModels()).demo);
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 1, threads: 1, speculative: 'ngram' });
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  // Turn 2 of the demo conversation; the user quotes the answer, so the answer is drafted from the prompt.
  const messages = [
    { role: 'user', content: `${QUESTION} ${ANSWER}` },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: WEATHER_RESULT },
  ];
  async function chat(extra: Record<string, unknown>): Promise<Completion> {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', messages, temperature: 0, ...extra }),
    });
    expect(res.status).toBe(200);
    return (await res.json()) as Completion;
  }

  it('answers exactly as without speculation, reports accepted drafts in usage and /metrics; a request opts out', async () => {
    expect(server.context.settings.speculative).toBe('ngram');
    const spec = await chat({});
    expect(spec.choices[0]!.message.content).toBe(ANSWER);
    const details = spec.usage.completion_tokens_details!;
    expect(details.accepted_prediction_tokens).toBeGreaterThan(0);
    expect(details.rejected_prediction_tokens).toBeGreaterThanOrEqual(0);
    const plain = await chat({ speculative: false });
    expect(plain.choices[0]!.message.content).toBe(ANSWER);
    expect(plain.usage.completion_tokens).toBe(spec.usage.completion_tokens);
    expect(plain.usage.completion_tokens_details).toBeUndefined();
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const accepted = Number(/^llamux_speculative_accepted_tokens_total (\d+)$/m.exec(metrics)?.[1]);
    const drafted = Number(/^llamux_speculative_drafted_tokens_total (\d+)$/m.exec(metrics)?.[1]);
    expect(accepted).toBe(details.accepted_prediction_tokens);
    expect(drafted).toBe(details.accepted_prediction_tokens + details.rejected_prediction_tokens);
    const bad = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', messages, speculative: 'no' }),
    });
    expect(bad.status).toBe(400);
  });

  it('the Anthropic endpoint takes the opt-out too', async () => {
    const res = await fetch(`${server.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', max_tokens: 64, temperature: 0, speculative: false, messages: [{ role: 'user', content: QUESTION }] }),
    });
    expect(res.status).toBe(200);
  });
});

describe('llamux server with speculative: draft', () => {
  it('loads the draft model, answers exactly, and refuses a draft mode without its path', async () => {
    const demo = (await ensureChatModels()).demo;
    const server = await createServer({ modelPath: demo, port: 0, ctx: 2048, parallel: 1, threads: 1, speculative: 'draft', draftModelPath: demo });
    try {
      expect(server.context.settings.speculative).toBe('draft');
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'x',
          temperature: 0,
          messages: [
            { role: 'user', content: QUESTION },
            { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
            { role: 'tool', tool_call_id: 'c1', content: WEATHER_RESULT },
          ],
        }),
      });
      const body = (await res.json()) as Completion;
      expect(body.choices[0]!.message.content).toBe(ANSWER);
      // the draft is the model itself: every draft token is kept
      expect(body.usage.completion_tokens_details!.accepted_prediction_tokens).toBeGreaterThan(0);
      expect(body.usage.completion_tokens_details!.rejected_prediction_tokens).toBe(0);
    } finally {
      await server.close();
    }
    await expect(createServer({ modelPath: demo, port: 0, ctx: 2048, parallel: 1, threads: 1, speculative: 'draft' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});

describe('llamux server with speculative: mtp', () => {
  it("loads the model's MTP block, drafts with it, and answers exactly as without speculation", async () => {
    const glm = (await zooModels(['glm4moe'])).glm4moe;
    // the zoo model's head makes a draft step cost about a decode step: a real model's cost
    const server = await createServer({ modelPath: glm.path, port: 0, ctx: 2048, parallel: 1, threads: 1, markers: false, speculative: { mode: 'mtp', draftCost: 0.05 } });
    try {
      expect(server.model.metadata.mtpLoaded).toBe(true);
      expect(server.context.settings.speculative).toBe('mtp');
      const complete = async (extra: Record<string, unknown>): Promise<{ choices: Array<{ text: string }>; usage: Completion['usage'] }> => {
        const res = await fetch(`${server.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'x', prompt: ' river stone cloud garden silver window', max_tokens: 40, temperature: 0, ...extra }),
        });
        expect(res.status).toBe(200);
        return (await res.json()) as { choices: Array<{ text: string }>; usage: Completion['usage'] };
      };
      const spec = await complete({});
      const plain = await complete({ speculative: false });
      expect(spec.choices[0]!.text).toBe(plain.choices[0]!.text);
      expect(spec.usage.completion_tokens).toBe(40);
      expect(spec.usage.completion_tokens_details!.accepted_prediction_tokens).toBeGreaterThan(20);
      expect(spec.usage.completion_tokens_details!.rejected_prediction_tokens).toBe(0);
    } finally {
      await server.close();
    }
  });
});

describe('llamux serve --spec', () => {
  function cli(args: string[]): Promise<{ code: number | null; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), ...args], { cwd: projectRoot, env: { ...process.env, NODE_NO_WARNINGS: '1' } });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stderr }));
    });
  }

  it('refuses an unknown mode, a draft mode without its model and limits without a mode, with exit code 2', async () => {
    const [bogus, draft, orphan] = await Promise.all([
      cli(['serve', '--model', 'x', '--spec', 'bogus']),
      cli(['serve', '--model', 'x', '--spec', 'draft']),
      cli(['serve', '--model', 'x', '--spec-draft-max', '4']),
    ]);
    expect(bogus.code).toBe(2);
    expect(bogus.stderr).toMatch(/--spec must be ngram, draft, mtp or off/);
    expect(draft.code).toBe(2);
    expect(draft.stderr).toMatch(/--spec draft and --draft-model PATH go together/);
    expect(orphan.code).toBe(2);
    expect(orphan.stderr).toMatch(/--spec-draft-max needs --spec ngram/);
  });
});
