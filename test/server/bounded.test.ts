// Issue 30: bounded work per request. Hostile texts that llama.cpp's tokenizer is quadratic on
// (special-token text, byte-fallback runs) and ambiguous tool schemas must not take the server
// down: normal requests keep being answered while 8 hostile requests run, the prompt workers are
// free within 100 ms of the time cap, and SIGTERM stops `llamux serve` mid-attack.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, Session, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { projectRoot, tinyModelPath } from '../helpers/paths.js';
import { openaiFor } from './clients.js';
import { ensureChatModels } from './fixtures.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function pct(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s.length === 0 ? 0 : s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

/** The worst texts found for the Llama 2 SPM tokenizer, each about `bytes` long. */
function hostileTexts(bytes: number): string[] {
  const fill = (unit: string) => unit.repeat(Math.floor(bytes / Buffer.byteLength(unit)));
  return [
    fill('</s><s>'), // quadratic special-token partition (13.4 s for 256 KB in one llama_tokenize call)
    fill('😀'), // quadratic byte fallback (214 s for 512 KB)
    fill('😀</s>'), // both
    fill('a'), // no cut point: every position is inside some token ("aa", "aaaa")
  ];
}

/** `n` clients, each sending hostile requests one after the other for `ms`, on a worker thread. */
function attackFromWorker(url: string, texts: string[], n: number, ms: number): Promise<Array<{ status: number; ms: number }>> {
  const code = `
    const { parentPort, workerData: { url, texts, n, ms } } = require('node:worker_threads');
    const bodies = texts.map((t) => JSON.stringify({ model: 'x', max_tokens: 1, messages: [{ role: 'user', content: t }] }));
    const until = performance.now() + ms;
    const out = [];
    Promise.all(Array.from({ length: n }, async (_, i) => {
      while (performance.now() < until) {
        const t0 = performance.now();
        try {
          const res = await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: bodies[i % bodies.length] });
          await res.arrayBuffer();
          out.push({ status: res.status, ms: performance.now() - t0 });
        } catch {
          out.push({ status: 0, ms: performance.now() - t0 });
        }
      }
    })).then(() => parentPort.postMessage(out));
  `;
  const w = new Worker(code, { eval: true, workerData: { url, texts, n, ms } });
  return new Promise((resolve, reject) => {
    w.once('message', (m: Array<{ status: number; ms: number }>) => {
      resolve(m);
      void w.terminate();
    });
    w.once('error', reject);
  });
}

async function post(url: string, body: unknown): Promise<{ status: number; ms: number }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  await res.arrayBuffer();
  return { status: res.status, ms: performance.now() - t0 };
}

describe('bounded work per request (#30)', () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
  });
  afterAll(async () => {
    await model?.dispose();
  });

  for (const ctx of [32768, 131072]) {
    it(`--ctx ${ctx}: 8 hostile tokenization requests at once leave normal requests answered (p99 < 2 s idle) and /health fast`, async () => {
      const server = await createServer({ model, port: 0, ctx, parallel: 2, threads: 1, log: () => {} });
      try {
        // As long as the byte bounds let through: the sequence × 27 bytes (Llama 2's longest
        // token), and the 1 MiB text limit.
        const bytes = Math.min(ctx * 27, 1024 * 1024) - 4096;
        const texts = hostileTexts(bytes);
        // The same requests before the attack: on a loaded machine every figure grows, so the
        // bounds below scale with this baseline (a starved event loop makes normal requests
        // wait for whole hostile tokenizations, seconds each: far past either bound).
        const baseline: number[] = [];
        const baselineHealth: number[] = [];
        for (let i = 0; i < 5; i++) {
          baseline.push((await post(server.url, { model: 'x', max_tokens: 2, messages: [{ role: 'user', content: `Before ${i}` }] })).ms);
          const t0 = performance.now();
          await (await fetch(`${server.url}/health`)).arrayBuffer();
          baselineHealth.push(performance.now() - t0);
        }
        const normalBound = Math.max(2000, 6 * Math.max(...baseline));
        const healthBound = Math.max(250, 6 * Math.max(...baselineHealth));
        const attackMs = 6000;
        const until = performance.now() + attackMs;
        // The attackers run on their own thread: their JSON and sockets must not slow down this
        // thread's clients, which measure the server.
        const attackers = [attackFromWorker(server.url, texts, 8, attackMs)];
        let hostile: Array<{ status: number; ms: number }> = [];
        void attackers[0]!.then((h) => (hostile = h));
        const normal: number[] = [];
        const normalStatus: number[] = [];
        const normals = (async () => {
          await sleep(200); // the attack is under way
          while (performance.now() < until) {
            const r = await post(server.url, { model: 'x', max_tokens: 2, messages: [{ role: 'user', content: `Hello there ${normal.length}` }] });
            normal.push(r.ms);
            normalStatus.push(r.status);
            await sleep(50);
          }
        })();
        const health: number[] = [];
        const healths = (async () => {
          while (performance.now() < until) {
            const t0 = performance.now();
            const r = await fetch(`${server.url}/health`);
            await r.arrayBuffer();
            health.push(performance.now() - t0);
            await sleep(20);
          }
        })();
        await Promise.all([...attackers, normals, healths]);
        // Immediately after.
        const after: number[] = [];
        for (let i = 0; i < 5; i++) {
          const r = await post(server.url, { model: 'x', max_tokens: 2, messages: [{ role: 'user', content: 'After the attack' }] });
          expect(r.status).toBe(200);
          after.push(r.ms);
        }
        console.log(
          `ctx ${ctx}: ${hostile.length} hostile requests of ~${(bytes / 1024).toFixed(0)} KB (statuses ${[...new Set(hostile.map((h) => h.status))].join(',')}, median ${pct(hostile.map((h) => h.ms), 50).toFixed(0)} ms); ` +
            `${normal.length} normal: p50 ${pct(normal, 50).toFixed(0)} ms, p99 ${pct(normal, 99).toFixed(0)} ms, max ${Math.max(...normal).toFixed(0)} ms; ` +
            `after: max ${Math.max(...after).toFixed(0)} ms; /health ${health.length}: p50 ${pct(health, 50).toFixed(1)} ms, p99 ${pct(health, 99).toFixed(1)} ms, max ${Math.max(...health).toFixed(1)} ms`,
        );
        expect(hostile.length).toBeGreaterThanOrEqual(8);
        for (const h of hostile) expect([400, 413]).toContain(h.status);
        expect(normal.length).toBeGreaterThanOrEqual(5);
        expect(normalStatus.every((s) => s === 200)).toBe(true);
        // A starved event loop delays every normal request by whole hostile tokenizations; a
        // loaded machine delays a few by a scheduler stall. The median catches the first, and the
        // tail bound (3x) leaves room for the second.
        expect(pct(normal, 50)).toBeLessThan(normalBound);
        expect(pct(normal, 99)).toBeLessThan(3 * normalBound);
        expect(Math.max(...after)).toBeLessThan(normalBound);
        // The target is 50 ms (measured 17-60 ms p99 here, idle); the bound leaves room for a
        // loaded 2-core machine, where other processes take the CPU from the event loop too.
        expect(pct(health, 99)).toBeLessThan(healthBound);
      } finally {
        await server.close();
      }
    });
  }

  it('frees a prompt worker within 100 ms when the time cap stops its job', async () => {
    // A cap so short that a large (bounded, but not instant) tokenization passes it.
    const server = await createServer({ model, port: 0, ctx: 131072, parallel: 1, threads: 1, tokenizeTimeoutMs: 15, tokenizeWorkers: 1, log: () => {} });
    try {
      const text = 'Hello world, '.repeat(70_000); // ~900 KB of plain text: ~200 ms of tokenizing
      // The whole tokenization, uncapped, on this machine now: a worker that ran its job to the
      // end instead of stopping at the cap would be busy for about this long.
      const t0 = performance.now();
      await model.tokenizeAsync(text, { addSpecial: false });
      const fullMs = performance.now() - t0;
      for (let i = 0; i < 3; i++) {
        const r = await post(server.url, { model: 'x', max_tokens: 1, messages: [{ role: 'user', content: text }] });
        expect(r.status).toBe(413);
      }
      const pool = server.prompts;
      const stops = pool.stopLatencies;
      // The 413 goes out at the cap; the worker answers its stop just after.
      for (let i = 0; i < 50 && stops.length < 3; i++) await sleep(20);
      console.log(`worker free after the cap: ${stops.map((s) => s.toFixed(1)).join(', ')} ms (whole job ${fullMs.toFixed(0)} ms); retired ${pool.retired}`);
      expect(pool.timeouts).toBe(3);
      expect(stops.length).toBe(3);
      // 100 ms idle (measured 1-20 ms); scaled when the machine is slow enough that the whole
      // job takes long. A worker that ran each job to its end would take about fullMs every
      // time; the median keeps one slow first stop (a cold worker) from deciding.
      const median = [...stops].sort((a, b) => a - b)[1]!;
      expect(median).toBeLessThan(Math.max(100, fullMs / 3));
      expect(pool.retired).toBe(0);
    } finally {
      await server.close();
    }
  });

  it('SIGTERM stops `llamux serve` within 5 s in the middle of an attack', async () => {
    const cli = join(projectRoot, 'src', 'cli.ts');
    const child = spawn(process.execPath, ['--import', 'tsx', cli, 'serve', '--model', tinyModelPath, '--port', '0', '--ctx', '32768', '--threads', '1'], {
      cwd: projectRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 60_000;
      while (!/listening on (http:\S+)/.test(out) && Date.now() < deadline) await sleep(50);
      const url = /listening on (http:\S+)/.exec(out)?.[1];
      expect(url, out).toBeDefined();
      const texts = hostileTexts(880_000);
      const attack = Array.from({ length: 8 }, (_, i) =>
        post(url!, { model: 'x', max_tokens: 1, messages: [{ role: 'user', content: texts[i % texts.length] }] }).catch(() => ({ status: 0, ms: 0 })),
      );
      // A generation in flight too.
      const normal = post(url!, { model: 'x', max_tokens: 64, messages: [{ role: 'user', content: 'Hello' }] }).catch(() => ({ status: 0, ms: 0 }));
      await sleep(300);
      const t0 = performance.now();
      child.kill('SIGTERM');
      const code = await Promise.race([exited, sleep(10_000).then(() => 'timeout' as const)]);
      const ms = performance.now() - t0;
      console.log(`SIGTERM mid-attack: exit ${code} after ${ms.toFixed(0)} ms`);
      expect(code).toBe(0);
      expect(ms).toBeLessThan(5000);
      await Promise.all([...attack, normal]);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });

  it('4 hostile grammar requests leave other requests decoding untouched: refused before the engine', async () => {
    // Every chat request the server admits becomes a Session.generate: count them, so that the
    // test can say that no hostile schema reached the engine (the reason other decode keeps its
    // speed; the speed itself is measured by `npm run bench -- --suite bounded`).
    const sessionGenerate = Session.prototype.generate;
    let admitted = 0;
    Session.prototype.generate = function (this: Session, ...a: Parameters<Session['generate']>) {
      admitted++;
      return sessionGenerate.apply(this, a);
    };
    const server = await createServer({ model, port: 0, ctx: 16384, parallel: 5, threads: 1, markers: 'hermes', log: () => {} });
    try {
      const openai = openaiFor(server);
      /**
       * The engine's decode speed for one request on the server's context (beside the HTTP
       * requests), over a 2,000-token conversation so that a step is not only overhead.
       */
      const history = model.tokenize('Once upon a time there was a story. '.repeat(220));
      const decode = async (): Promise<number> => {
        const r = await server.context.generate({ prompt: history, maxTokens: 384, temperature: 0 }).result;
        return r.timings.decodeTokensPerSec;
      };
      // The attack of the issue: anyOf array branches nested 16 deep.
      const defs: Record<string, unknown> = { l16: { type: 'integer' } };
      for (let d = 15; d >= 0; d--) defs[`l${d}`] = { anyOf: [{ type: 'array', items: { $ref: `#/$defs/l${d + 1}` } }, { type: 'array', items: { type: 'array', items: { $ref: `#/$defs/l${d + 1}` } } }] };
      const hostileTools = [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object', properties: { x: { $ref: '#/$defs/l0' } }, required: ['x'], $defs: defs } } }];
      // The most ambiguity a schema may have (16 parses at once: 4 nested 2-way choices), run to the token limit.
      const worstDefs: Record<string, unknown> = { l4: { type: 'integer' } };
      for (let d = 3; d >= 0; d--) worstDefs[`l${d}`] = { anyOf: [{ type: 'array', items: { $ref: `#/$defs/l${d + 1}` } }, { type: 'array', items: { type: 'array', items: { $ref: `#/$defs/l${d + 1}` } } }] };
      const worstTools = [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object', properties: { x: { $ref: '#/$defs/l0' } }, required: ['x'], $defs: worstDefs } } }];
      const attack = (tools: unknown[], until: () => boolean) =>
        Array.from({ length: 4 }, async () => {
          const statuses: number[] = [];
          while (!until()) {
            const r = await post(server.url, { model: 'x', max_tokens: 96, temperature: 1, tool_choice: 'required', tools, messages: [{ role: 'user', content: 'call f' }] });
            statuses.push(r.status);
            // A refused request ends at once: each client sends again after 100 ms (10 a second)
            // rather than in a tight loop, which on 2 cores would measure the event loop's CPU.
            if (r.status === 400) await sleep(100);
          }
          return statuses;
        });
      const speeds = async (tools?: unknown[]): Promise<{ speed: number; statuses: number[]; admitted: number }> => {
        let done = false;
        const before = admitted;
        const load = tools ? attack(tools, () => done) : [];
        await sleep(tools ? 100 : 0);
        const speed = await decode();
        done = true;
        const statuses = (await Promise.all(load)).flat();
        return { speed, statuses, admitted: admitted - before };
      };
      // An unambiguous schema of the same shape: what any 4 grammar requests cost the engine thread.
      const plainTools = [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object', properties: { x: { type: 'array', items: { type: 'array', items: { type: 'integer' } } } }, required: ['x'] } } }];
      await decode(); // warm
      // One decode of each kind: what is asserted is admission (the speeds are printed only;
      // `npm run bench -- --suite bounded` measures them with interleaved repeats).
      const alone = await speeds();
      const hostile = await speeds(hostileTools);
      const worst = await speeds(worstTools);
      const plain = await speeds(plainTools);
      const base = alone.speed;
      console.log(
        `decode alone ${alone.speed.toFixed(0)} tok/s; with 4 hostile (16-deep ambiguous) grammar requests ${hostile.speed.toFixed(0)} tok/s (${(hostile.speed / base).toFixed(2)}x, ${hostile.statuses.length} requests, statuses ${[...new Set(hostile.statuses)].join(',')}); ` +
          `with 4 requests at the ambiguity limit ${worst.speed.toFixed(0)} tok/s (${(worst.speed / base).toFixed(2)}x, statuses ${[...new Set(worst.statuses)].join(',')}); ` +
          `with 4 unambiguous grammar requests ${plain.speed.toFixed(0)} tok/s (${(plain.speed / base).toFixed(2)}x)`,
      );
      // Every hostile request is refused before the engine sees it (the 0.9x target rests
      // on this; the ratio printed above moves with the machine's load, so the benchmark shows
      // it). The control: the schemas at the ambiguity limit and the plain ones are admitted.
      expect(hostile.statuses.length).toBeGreaterThan(0);
      expect(hostile.statuses.every((st) => st === 400)).toBe(true);
      expect(hostile.admitted).toBe(0);
      expect(worst.statuses.length).toBeGreaterThan(0);
      expect(worst.statuses.every((st) => st === 200)).toBe(true);
      expect(worst.admitted).toBe(worst.statuses.length);
      expect(plain.admitted).toBe(plain.statuses.length);
      expect(plain.admitted).toBeGreaterThan(0);
    } finally {
      Session.prototype.generate = sessionGenerate;
      await server.close();
    }
    // Four decodes of 384 tokens, two of them beside admitted grammar requests that slow the
    // engine 5-30x.
  }, 180_000);

  it('answers 400 naming the JSON pointer to ambiguous nested schemas and malformed $ref encodings', async () => {
    const demo = await loadModel((await ensureChatModels()).demo);
    const server = await createServer({ model: demo, port: 0, ctx: 4096, parallel: 1, threads: 1, log: () => {} });
    try {
      const openai = openaiFor(server);
      // anyOf branches that both open an array, nested 12 deep through $defs.
      const defs: Record<string, unknown> = { l12: { type: 'integer' } };
      for (let d = 11; d >= 0; d--) {
        defs[`l${d}`] = { anyOf: [{ type: 'array', items: { $ref: `#/$defs/l${d + 1}` } }, { type: 'array', items: { type: 'array', items: { $ref: `#/$defs/l${d + 1}` } } }] };
      }
      const tool = (parameters: unknown) => [{ type: 'function' as const, function: { name: 'f', parameters: parameters as Record<string, unknown> } }];
      const ambiguous = { type: 'object', properties: { x: { $ref: '#/$defs/l0' } }, required: ['x'], $defs: defs };
      const e1 = (await openai.chat.completions.create({ model: 'x', max_tokens: 4, tool_choice: 'required', messages: [{ role: 'user', content: 'hi' }], tools: tool(ambiguous) }).catch((e: unknown) => e)) as { status: number; message: string };
      expect(e1.status).toBe(400);
      expect(e1.message).toMatch(/\/\$defs\/l\d+\/anyOf|\/\$ref/);
      expect(e1.message).toMatch(/ambiguous/);
      // Recursion through an ambiguous choice.
      const recursive = { type: 'object', properties: { t: { $ref: '#/$defs/t' } }, $defs: { t: { anyOf: [{ type: 'array', items: { $ref: '#/$defs/t' } }, { type: 'array', items: { type: 'integer' } }] } } };
      const e2 = (await openai.chat.completions.create({ model: 'x', max_tokens: 4, tool_choice: 'required', messages: [{ role: 'user', content: 'hi' }], tools: tool(recursive) }).catch((e: unknown) => e)) as { status: number; message: string };
      expect(e2.status).toBe(400);
      expect(e2.message).toMatch(/ambiguous recursion/);
      // Malformed %-encoding in a $ref: 400, not 500.
      const malformed = { type: 'object', properties: { a: { $ref: '#/$defs/%E0%A4%A' } }, $defs: {} };
      const e3 = (await openai.chat.completions.create({ model: 'x', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }], tools: tool(malformed) }).catch((e: unknown) => e)) as { status: number; message: string };
      expect(e3.status).toBe(400);
      expect(e3.message).toMatch(/\/properties\/a\/\$ref.*malformed %-encoding/);
      // Unambiguous recursion and distinct first keys are still served.
      const fine = { type: 'object', properties: { t: { $ref: '#/$defs/n' } }, $defs: { n: { anyOf: [{ type: 'object', properties: { leaf: { type: 'integer' } }, required: ['leaf'] }, { type: 'object', properties: { kids: { type: 'array', items: { $ref: '#/$defs/n' } } }, required: ['kids'] }] } } };
      const ok = await openai.chat.completions.create({ model: 'x', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }], tools: tool(fine) });
      expect(ok.choices.length).toBe(1);
    } finally {
      await server.close();
      await demo.dispose();
    }
  });
});
