// Two `llamux serve` instances behind nginx, routed by conversation (docs/deploy.md).
//
//   npm run example:deploy        (needs nginx: apt-get install -y nginx-light)
//
// Starts two instances of the scripted demo model on free loopback ports and nginx in front of
// them (examples/deploy/nginx.conf: `hash $http_x_llamux_conversation consistent`), then talks
// to nginx with the `openai` client only: six conversations, two turns each (a get_weather tool
// call, then the answer after the tool result), printing for every turn which instance answered
// and how many prompt tokens were cached. Then it stops one instance and runs a third turn of
// every conversation: the moved ones answer the same, from a cold prefill.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { ensureTestModels } from '../../src/gguf/fixtures.js';

type Msg = OpenAI.Chat.Completions.ChatCompletionMessageParam;

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const children: ChildProcess[] = [];
let nginxPrefix: string | undefined;

const TOOLS: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];

function findNginx(): string | undefined {
  for (const candidate of [process.env.NGINX, 'nginx', '/usr/sbin/nginx']) {
    if (candidate && spawnSync(candidate, ['-v'], { stdio: 'ignore' }).status === 0) return candidate;
  }
  return undefined;
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => res(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

/** Starts a process and resolves once a line of its output matches `ready`. */
function start(cmd: string, args: string[], ready: RegExp, what: string): Promise<ChildProcess> {
  return new Promise((res, rej) => {
    const child = spawn(cmd, args, { cwd: root, env: { ...process.env, NODE_NO_WARNINGS: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    const timer = setTimeout(() => rej(new Error(`${what} did not start:\n${out}`)), 60_000);
    const onData = (d: Buffer): void => {
      out += d.toString();
      if (ready.test(out)) {
        clearTimeout(timer);
        res(child);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      rej(new Error(`${what} exited (${code}):\n${out}`));
    });
  });
}

function cleanup(): void {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  if (nginxPrefix) rmSync(nginxPrefix, { recursive: true, force: true });
}
process.on('exit', cleanup);
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(130));

interface TurnReport {
  conversation: string;
  turn: number;
  instance: string;
  promptTokens: number;
  cachedTokens: number;
  reply: string;
}

async function main(): Promise<void> {
  const nginx = findNginx();
  if (!nginx) {
    console.error('This example needs nginx. On Debian/Ubuntu: apt-get install -y nginx-light (or set NGINX=/path/to/nginx).');
    process.exit(2);
  }
  const modelDir = join(root, '.cache', 'demo');
  const { demo } = await ensureTestModels(modelDir, ['demo']);

  // Two instances of the same model (in production: two machines, `--host 0.0.0.0 --allowed-host NAME`).
  const ports = [await freePort(), await freePort()];
  const names = new Map<string, string>();
  const instances: ChildProcess[] = [];
  for (const [i, port] of ports.entries()) {
    const name = `instance-${'AB'[i]}`;
    names.set(`127.0.0.1:${port}`, name);
    instances.push(
      await start(process.execPath, ['--import', 'tsx', join(root, 'src', 'cli.ts'), 'serve', '--model', demo.path, '--port', String(port), '--threads', '1', '--parallel', '2', '--ctx', '4096', '--quiet'], /listening on/, name),
    );
  }

  // nginx in front, from examples/deploy/nginx.conf.
  nginxPrefix = join(tmpdir(), `llamux-deploy-${process.pid}`);
  for (const d of ['client_body', 'proxy']) mkdirSync(join(nginxPrefix, d), { recursive: true });
  const listen = await freePort();
  const conf = readFileSync(join(here, 'nginx.conf'), 'utf8')
    .replaceAll('{{PREFIX}}', nginxPrefix)
    .replaceAll('{{LISTEN}}', `127.0.0.1:${listen}`)
    .replaceAll('{{SERVERS}}', ports.map((p) => `    server 127.0.0.1:${p} max_fails=1 fail_timeout=30s;`).join('\n'));
  writeFileSync(join(nginxPrefix, 'nginx.conf'), conf);
  // One process (no master/worker pair), so stopping it cannot leave a worker behind.
  const proxy = spawn(nginx, ['-p', nginxPrefix, '-c', join(nginxPrefix, 'nginx.conf'), '-g', 'daemon off; master_process off;'], { stdio: ['ignore', 'inherit', 'inherit'] });
  children.push(proxy);
  await waitForHttp(`http://127.0.0.1:${listen}/health`);
  console.log(`nginx on 127.0.0.1:${listen} -> ${[...names].map(([addr, n]) => `${n} (${addr})`).join(', ')}\n`);

  const client = new OpenAI({ baseURL: `http://127.0.0.1:${listen}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
  const chat = async (conversation: string, turn: number, messages: Msg[]): Promise<{ report: TurnReport; message: OpenAI.Chat.Completions.ChatCompletionMessage }> => {
    // The conversation header goes on every turn: it is all the router looks at.
    const { data, response } = await client.chat.completions
      .create({ model: 'demo', messages, tools: TOOLS, temperature: 0 }, { headers: { 'x-llamux-conversation': conversation } })
      .withResponse();
    const upstream = (response.headers.get('x-llamux-upstream') ?? '?').split(',').map((s) => s.trim()).at(-1)!;
    const message = data.choices[0]!.message;
    const call = message.tool_calls?.[0];
    const reply = call && call.type === 'function' ? `tool call ${call.function.name}(${call.function.arguments})` : JSON.stringify(message.content);
    return {
      message,
      report: {
        conversation,
        turn,
        instance: names.get(upstream) ?? upstream,
        promptTokens: data.usage?.prompt_tokens ?? 0,
        cachedTokens: data.usage?.prompt_tokens_details?.cached_tokens ?? 0,
        reply,
      },
    };
  };

  const conversations = Array.from({ length: 6 }, (_, k) => `conv-${k + 1}`);
  const histories = new Map<string, Msg[]>();
  const rows: TurnReport[] = [];
  for (const id of conversations) {
    // A system message of its own: conversations share no prefix beyond the template's first tokens.
    const messages: Msg[] = [
      { role: 'system', content: `You are assistant ${id} of the weather desk.` },
      { role: 'user', content: 'What is the weather in Paris?' },
    ];
    const t1 = await chat(id, 1, messages);
    messages.push(t1.message);
    const call = t1.message.tool_calls?.[0];
    if (!call) throw new Error(`${id}: expected a tool call on turn 1, got ${t1.report.reply}`);
    messages.push({ role: 'tool', tool_call_id: call.id, content: '{"temperature": 18, "condition": "sunny"}' });
    const t2 = await chat(id, 2, messages);
    messages.push(t2.message);
    histories.set(id, messages);
    rows.push(t1.report, t2.report);
  }
  print('Turns 1 and 2 through nginx (turn 2 should be a KV hit on the instance that ran turn 1)', rows);
  const sticky = conversations.every((id) => {
    const [a, b] = rows.filter((r) => r.conversation === id);
    return a!.instance === b!.instance && b!.cachedTokens >= a!.promptTokens;
  });
  console.log(sticky ? 'every turn 2 landed on its turn-1 instance and reused its KV\n' : 'NOT every turn 2 was a KV hit on its turn-1 instance\n');

  // Remove instance B: nginx finds it refusing connections and moves its conversations to A.
  const removed = [...names.values()][1]!;
  console.log(`stopping ${removed}\n`);
  instances[1]!.kill('SIGTERM');
  await new Promise((r) => instances[1]!.once('exit', r));
  const after: TurnReport[] = [];
  for (const id of conversations) {
    const messages = histories.get(id)!;
    messages.push({ role: 'user', content: 'What is the weather in Paris?' });
    const t3 = await chat(id, 3, messages);
    messages.push(t3.message);
    after.push(t3.report);
  }
  print(`Turn 3 after ${removed} was removed (its conversations: cold prefill on the other instance)`, after);
  // A hit reuses at least the previous turn's whole prompt; a cold prefill only the few
  // template tokens every conversation starts with.
  const hit = (r: TurnReport, i: number): boolean => r.cachedTokens >= rows[2 * i + 1]!.promptTokens;
  const moved = after.filter((_, i) => rows[2 * i]!.instance === removed);
  const coldMoved = after.filter((r, i) => rows[2 * i]!.instance === removed && !hit(r, i));
  const stayedHit = after.filter((r, i) => rows[2 * i]!.instance !== removed && hit(r, i));
  const answeredAlike = after.every((r) => r.reply === after[0]!.reply);
  console.log(`${moved.length} conversation(s) moved to the other instance, ${coldMoved.length} of them prefilled cold; ${stayedHit.length} of ${after.length - moved.length} that stayed were KV hits; same reply in every conversation: ${answeredAlike}`);
}

async function waitForHttp(url: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer`);
}

function print(title: string, rows: TurnReport[]): void {
  console.log(`${title}\n`);
  const cols = ['conversation', 'turn', 'instance', 'prompt tokens', 'cached tokens', 'reply'];
  const cells = rows.map((r) => [r.conversation, String(r.turn), r.instance, String(r.promptTokens), String(r.cachedTokens), r.reply]);
  const widths = cols.map((c, i) => Math.max(c.length, ...cells.map((r) => r[i]!.length)));
  const line = (v: string[]): string => `| ${v.map((x, i) => x.padEnd(widths[i]!)).join(' | ')} |`;
  console.log([line(cols), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...cells.map(line)].join('\n'));
  console.log();
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  },
);
