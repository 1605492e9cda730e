// Issue 30's speed target: other requests keep >= 0.9x of their decode speed while 4 clients send
// hostile (ambiguous, 16-deep) tool schemas to the server. The schemas are refused at read (400),
// so the engine never sees them; what remains is the HTTP work on the event loop. One server, one
// decode measured through its context, alone and under attack, interleaved `reps` times so that
// the machine's other load falls on both columns alike; the median of each column.
import { loadModel, setLogger } from '../../src/index.js';
import { createServer } from '../../src/server/index.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { fmt, progress, progressDone, table, writeResult } from '../report.js';

export interface BoundedBenchOptions {
  quick?: boolean;
  threads?: number;
  model?: BenchModelName;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** anyOf branches that both open an array, nested `depth` deep: the ambiguity the server refuses. */
function hostileTools(depth: number): unknown[] {
  const defs: Record<string, unknown> = { [`l${depth}`]: { type: 'integer' } };
  for (let d = depth - 1; d >= 0; d--) {
    defs[`l${d}`] = { anyOf: [{ type: 'array', items: { $ref: `#/$defs/l${d + 1}` } }, { type: 'array', items: { type: 'array', items: { $ref: `#/$defs/l${d + 1}` } } }] };
  }
  return [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { $ref: '#/$defs/l0' } }, required: ['x'], $defs: defs } } }];
}

export async function runBoundedBench(opts: BoundedBenchOptions = {}): Promise<string> {
  const threads = opts.threads ?? 1;
  const name: BenchModelName = opts.model ?? (opts.quick ? 'tiny-random' : '250m-q8_0');
  const reps = opts.quick ? 2 : 5;
  const genTokens = opts.quick ? 64 : 128;
  const clients = 4;
  progress(`bounded: preparing ${name}`);
  const bm = await ensureBenchModel(name);
  setLogger('silent');
  const model = await loadModel(bm.path);
  const server = await createServer({ model, port: 0, ctx: 8192, parallel: clients + 1, threads, markers: 'hermes', log: () => {} });
  const bias = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
  const prompt = benchPrompt(512, model.vocab.size);
  const body = JSON.stringify({ model: 'x', max_tokens: 96, temperature: 1, tool_choice: 'required', tools: hostileTools(16), messages: [{ role: 'user', content: 'call f' }] });
  const statuses = new Map<number, number>();
  let sent = 0;
  const decode = async () => (await server.context.generate({ prompt, maxTokens: genTokens, temperature: 0, logitBias: bias }).result).timings.decodeTokensPerSec;
  const measure = async (attack: boolean): Promise<number> => {
    let done = false;
    const load = attack
      ? Array.from({ length: clients }, async () => {
          while (!done) {
            const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
            await res.arrayBuffer();
            sent++;
            statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
            // A refused client sends again after 100 ms: 10 requests a second each.
            if (res.status === 400) await sleep(100);
          }
        })
      : [];
    if (attack) await sleep(100);
    const speed = await decode();
    done = true;
    await Promise.all(load);
    return speed;
  };
  const alone: number[] = [];
  const attacked: number[] = [];
  try {
    await decode(); // warm
    for (let i = 0; i < reps; i++) {
      progress(`bounded: run ${i + 1}/${reps}`);
      alone.push(await measure(false));
      attacked.push(await measure(true));
    }
  } finally {
    await server.close();
    await model.dispose();
  }
  progressDone();
  const a = median(alone);
  const h = median(attacked);
  const codes = [...statuses].map(([c, n]) => `${n} x ${c}`).join(', ');
  const out = [
    table(`bounded: decode beside ${clients} clients sending hostile tool schemas (${bm.description}, ${threads} thread${threads > 1 ? 's' : ''}; ${genTokens} tokens after a 512-token prompt; median of ${reps}, interleaved)`, [
      { decode: 'alone', 'tok/s': fmt(a), runs: alone.map((x) => fmt(x)).join(' '), 'vs alone': '1.00x' },
      { decode: `beside ${clients} hostile clients`, 'tok/s': fmt(h), runs: attacked.map((x) => fmt(x)).join(' '), 'vs alone': `${(h / a).toFixed(2)}x (target >= 0.9x)` },
    ]),
    `hostile requests sent: ${sent} (${codes}); every one must be a 400`,
  ];
  out.push(`results: ${writeResult('bounded', { mode: opts.quick ? 'quick' : 'full', model: { name, description: bm.description }, settings: { threads, reps, genTokens, clients }, alone, attacked, statuses: Object.fromEntries(statuses) })}`);
  return out.join('\n');
}
