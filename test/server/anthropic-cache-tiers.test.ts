// Anthropic prompt caching through the engine's tiers: a breakpoint's prefix outlives its live
// sequence (one sequence, other conversations in between) in the RAM tier under budget
// pressure while its ttl runs, goes like any state once the ttl is over, comes back from the
// disk tier, and a refusal (no tier, a state over the budget) is reported in the header, the
// usage and one log line. With the official @anthropic-ai/sdk client on the scripted demo model.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer, type ServerOptions } from '../../src/server/index.js';
import { anthropicFor } from './clients.js';
import { QUESTION, ensureChatModels } from './fixtures.js';

const SHARED = 'You answer weather questions for travellers. Keep answers short, name the city, and quote the tool result. '.repeat(2);
const GREEDY = { temperature: 0 };

function request(tail: string, cached = true): Anthropic.MessageCreateParamsNonStreaming {
  return {
    model: 'claude-any',
    max_tokens: 8,
    ...GREEDY,
    system: [{ type: 'text', text: SHARED, ...(cached ? { cache_control: { type: 'ephemeral' as const } } : {}) }, { type: 'text', text: tail }],
    messages: [{ role: 'user', content: QUESTION }],
  };
}

/** Conversations with system prompts of their own (~400 tokens each): they take the one sequence and fill the RAM tier. */
async function otherTraffic(anthropic: Anthropic, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const system = `Traffic desk ${i}: ${'route planning, road closures and ferry times for the coast. '.repeat(6)}`;
    await anthropic.messages.create({ model: 'claude-any', max_tokens: 2, ...GREEDY, system, messages: [{ role: 'user', content: QUESTION }] });
  }
}

describe('Anthropic prompt caching through the RAM and disk tiers', () => {
  let model: Model;
  let breakpoint: number;
  const logs: string[] = [];
  const dirs: string[] = [];

  const start = (o: Partial<ServerOptions>): Promise<LlamuxServer> =>
    createServer({ model, port: 0, ctx: 4096, parallel: 1, threads: 1, log: (level, m) => logs.push(`${level}: ${m}`), ...o });

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    const s = await start({});
    try {
      const res = await fetch(`${s.url}/tokenize`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ content: `<|im_start|>system\n${SHARED}`, add_special: true, parse_special: true }),
      });
      breakpoint = ((await res.json()) as { tokens: number[] }).tokens.length;
    } finally {
      await s.close();
    }
  });
  afterAll(async () => {
    await model.dispose();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  /** A, then other conversations evict its sequence (and, under the 1 MiB budget, unretained states), then B. */
  async function evictionFlow(o: Partial<ServerOptions>, cached: boolean, pauseMs = 0) {
    const server = await start({ cacheRamMb: 1, ...o });
    try {
      const anthropic = anthropicFor(server);
      const a = await anthropic.messages.create(request('Alpha desk.', cached));
      if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
      await otherTraffic(anthropic, 10);
      const before = server.context.cacheStats();
      const b = await anthropic.messages.create(request('Beta desk.', cached));
      return { a, b, before, after: server.context.cacheStats() };
    } finally {
      await server.close();
    }
  }

  it('keeps the breakpoint prefix in the RAM tier while its ttl runs, under budget pressure, after its sequence was evicted', async () => {
    const kept = await evictionFlow({}, true);
    expect(kept.a.usage.cache_creation_input_tokens).toBe(breakpoint);
    expect(kept.before.ramEvictions).toBeGreaterThan(0); // the other conversations did push states out
    expect(kept.before.spills).toBeGreaterThan(0); // and took the sequence
    expect(kept.b.usage.cache_read_input_tokens).toBe(breakpoint);
    expect(kept.after.restores).toBeGreaterThan(kept.before.restores); // restored from the tier, not shared live

    // The same traffic without cache_control: B finds nothing of A.
    const plain = await evictionFlow({}, false);
    expect(plain.a.usage.cache_creation_input_tokens).toBe(0);
    expect(plain.b.usage.cache_read_input_tokens).toBeLessThan(breakpoint);
    // the restored prefix changes nothing in the greedy answer
    expect(kept.b.content).toEqual(plain.b.content);
  });

  it('after the ttl the prefix is an ordinary state: the same traffic evicts it', async () => {
    const expired = await evictionFlow({ promptCacheTtlMs: { '5m': 150 } }, true, 400);
    expect(expired.a.usage.cache_creation_input_tokens).toBe(breakpoint);
    expect(expired.before.ramEvictions).toBeGreaterThan(0);
    expect(expired.b.usage.cache_read_input_tokens).toBeLessThan(breakpoint);
    // B wrote it again
    expect(expired.b.usage.cache_creation_input_tokens).toBe(breakpoint - expired.b.usage.cache_read_input_tokens!);
  });

  it('keeps it in the disk tier (no RAM tier) and restores it from there', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llamux-anthropic-cache-'));
    dirs.push(dir);
    const server = await start({ cacheRamMb: 0, cacheDir: dir });
    try {
      const anthropic = anthropicFor(server);
      const a = await anthropic.messages.create(request('Alpha desk.')).withResponse();
      expect(a.data.usage.cache_creation_input_tokens).toBe(breakpoint);
      expect(a.response.headers.get('x-llamux-cache-retention')).toBe('kept');
      // the I/O thread writes it; wait until the index has it
      for (let i = 0; i < 200 && server.context.cacheStats().diskEntries === 0; i++) await new Promise((r) => setTimeout(r, 25));
      await otherTraffic(anthropic, 2);
      const before = server.context.cacheStats();
      const b = await anthropic.messages.create(request('Beta desk.'));
      expect(b.usage.cache_read_input_tokens).toBe(breakpoint);
      expect(server.context.cacheStats().diskRestores).toBeGreaterThan(before.diskRestores);
    } finally {
      await server.close();
    }
  });

  it('reports a refusal: no tier at all, or a prefix state over the RAM budget (header, usage, one log line each)', async () => {
    logs.length = 0;
    const none = await start({ cacheRamMb: 0 });
    try {
      const anthropic = anthropicFor(none);
      for (const tail of ['Alpha desk.', 'Beta desk.']) {
        const r = await anthropic.messages.create(request(tail)).withResponse();
        expect(r.response.headers.get('x-llamux-cache-retention')).toBe('refused=1; reason=no-tier');
        expect(r.data.usage.cache_creation_input_tokens).toBe(0);
      }
      // streamed: the header comes with message_start
      const s = await anthropic.messages.create({ ...request('Gamma desk.'), stream: true }).withResponse();
      expect(s.response.headers.get('x-llamux-cache-retention')).toBe('refused=1; reason=no-tier');
      for await (const _ of s.data) {
        // drain
      }
    } finally {
      await none.close();
    }
    expect(logs.filter((l) => l.includes('reason') || l.includes('were not kept'))).toEqual([expect.stringMatching(/^warn: Prompt-cache breakpoints \(cache_control\) were not kept: the server has neither a RAM tier/)]);

    // ~2,700 tokens of state at ~0.5 KiB per token: over a 1 MiB RAM tier, and no disk tier.
    const big = await start({ cacheRamMb: 1 });
    try {
      const long = 'Long field manual for weather stations, chapter and verse, with every table spelled out. '.repeat(30);
      const r = await anthropicFor(big)
        .messages.create({ ...request('Alpha desk.'), system: [{ type: 'text', text: long, cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'Alpha.' }] })
        .withResponse();
      expect(r.data.usage.input_tokens).toBeGreaterThan(2000);
      expect(r.response.headers.get('x-llamux-cache-retention')).toBe('refused=1; reason=budget');
      expect(r.data.usage.cache_creation_input_tokens).toBe(0);
      expect(r.data.usage.cache_read_input_tokens).toBe(0);
    } finally {
      await big.close();
    }
    expect(logs.filter((l) => l.includes('larger than the RAM tier budget'))).toHaveLength(1);
  });
});
