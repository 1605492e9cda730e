// Server soak (issue #15, finding 8): `llamux serve` in a child process takes thousands of
// requests through the official clients: two-turn tool conversations (each a new
// conversation, session and stored call), plain and streamed completions, Anthropic messages,
// and streams aborted mid-way. The child's RSS (from /proc) is sampled every 250 requests;
// the run fails when RSS after warm-up moves more than ±15 % or a request fails unexpectedly.
// Run: `npm run test:soak:server [-- --requests 5000]` (not part of `npm test`).
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { projectRoot, tempDir } from '../helpers/paths.js';
import { ANTHROPIC_TOOLS, ensureChatModels, OPENAI_TOOLS, QUESTION, weatherTurn2 } from '../server/fixtures.js';

const args = process.argv.slice(2);
const total = Number(args[args.indexOf('--requests') + 1]) || 5_000;
const concurrency = 8;
const dir = tempDir('server-soak');
const { demo } = await ensureChatModels();

const child = spawn(
  process.execPath,
  ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), 'serve', '--model', demo, '--port', '0', '--threads', '1', '--parallel', '4',
    '--markers', 'hermes', '--store', join(dir, 'calls.db'), '--cache-dir', join(dir, 'kv'), '--session-ttl', '2000',
    // a small RAM tier, so the run reaches its steady state (tier full, LRU evicting) early
    '--cache-ram', '32'],
  { cwd: projectRoot, stdio: ['ignore', 'pipe', 'inherit'] },
);
const url = await new Promise<string>((resolve, reject) => {
  let out = '';
  const timer = setTimeout(() => reject(new Error(`the server did not start: ${out}`)), 60_000);
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
    const m = /listening on (http:\/\/\S+)/.exec(out);
    if (m) {
      clearTimeout(timer);
      resolve(m[1]!);
    }
  });
});
const rssMb = (): number => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
  return m ? Math.round(Number(m[1]) / 1024) : -1;
};

const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
const anthropic = new Anthropic({ baseURL: url, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
let seed = 7;
const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);

async function conversation(): Promise<number> {
  const first = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS });
  const call = first.choices[0]!.message.tool_calls?.[0];
  if (!call) throw new Error('turn 1 made no tool call');
  const conversationHeader = { 'x-llamux-conversation': `c${rand(1e9)}` };
  const second = await openai.chat.completions.create(
    {
      model: 'x',
      messages: weatherTurn2(call as Parameters<typeof weatherTurn2>[0]),
      tools: OPENAI_TOOLS,
    },
    { headers: conversationHeader },
  );
  if (!second.choices[0]!.message.content) throw new Error('turn 2 has no answer');
  return 2;
}

async function one(): Promise<number> {
  const kind = rand(10);
  if (kind < 4) return conversation();
  if (kind < 6) {
    await openai.chat.completions.create({ model: 'x', max_tokens: 1 + rand(16), messages: [{ role: 'user', content: `question ${rand(100_000)}` }] });
    return 1;
  }
  if (kind < 8) {
    await anthropic.messages.create({ model: 'x', max_tokens: 1 + rand(16), tools: ANTHROPIC_TOOLS, messages: [{ role: 'user', content: kind === 6 ? QUESTION : `hello ${rand(1000)}` }] });
    return 1;
  }
  // a stream, aborted after its first chunk half of the time
  const ac = new AbortController();
  const stream = await openai.chat.completions.create(
    { model: 'x', stream: true, messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS },
    { signal: ac.signal },
  );
  const abort = kind === 9;
  try {
    for await (const _ of stream) {
      if (abort) {
        ac.abort();
        break;
      }
    }
  } catch (e) {
    if (!abort) throw e;
  }
  return 1;
}

let done = 0;
let failed = 0;
const errors: string[] = [];
const samples: Array<{ requests: number; rssMb: number; seconds: number }> = [];
const started = Date.now();
let nextSample = 250;
samples.push({ requests: 0, rssMb: rssMb(), seconds: 0 });
await Promise.all(
  Array.from({ length: concurrency }, async () => {
    while (done < total) {
      try {
        done += await one();
      } catch (e) {
        failed++;
        done++;
        if (errors.length < 10) errors.push((e as Error).message);
      }
      if (done >= nextSample) {
        nextSample += 250;
        samples.push({ requests: done, rssMb: rssMb(), seconds: Math.round((Date.now() - started) / 100) / 10 });
        process.stderr.write(`\r${done}/${total} rss ${samples.at(-1)!.rssMb} MB`);
      }
    }
  }),
);
process.stderr.write('\n');
const health = (await (await fetch(`${url}/health`)).json()) as Record<string, unknown>;
child.kill('SIGTERM');
await new Promise((r) => child.on('exit', r));
rmSync(dir, { recursive: true, force: true });

// Warm-up: the first fifth (allocator arenas, caches and the store reach their steady size).
const warm = samples.slice(Math.max(1, Math.floor(samples.length / 5)));
const base = warm[0]!.rssMb;
const band = [Math.min(...warm.map((s) => s.rssMb)), Math.max(...warm.map((s) => s.rssMb))];
const drift = Math.max(...warm.map((s) => Math.abs(s.rssMb - base) / base));
console.log('requests  seconds  rss MB');
for (const s of samples) console.log(`${String(s.requests).padStart(8)}  ${String(s.seconds).padStart(7)}  ${String(s.rssMb).padStart(6)}`);
console.log(JSON.stringify({ requests: done, failed, errors, rssMbAfterWarmup: band, maxDriftPercent: Math.round(drift * 1000) / 10, health: { sessions: (health.cache as Record<string, unknown> | undefined) ?? health } }, null, 2));
if (failed > 0 || drift > 0.15) process.exit(1);
