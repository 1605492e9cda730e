import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseMarkersArg, parseRpcList } from '../../src/cli.js';
import { projectRoot, tempDir } from '../helpers/paths.js';
import { ensureChatModels, OPENAI_TOOLS, QUESTION, weatherTurn2 } from '../server/fixtures.js';
import { POOL_QUESTION, answerOf, poolFolder } from '../helpers/pool-models.js';

/** `llamux serve ...args` in a child process; resolves with its URL once it listens. */
function serve(args: string[]): Promise<{ url: string; child: ReturnType<typeof spawn>; stdout: () => string; stderr: () => string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), 'serve', ...args], { cwd: projectRoot });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no URL in time; stdout: ${stdout}; stderr: ${stderr}`)), 30_000);
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      const m = /listening on (http:\/\/\S+)[\s\S]*Anthropic:/.exec(stdout);
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1]!, child, stdout: () => stdout, stderr: () => stderr });
      }
    });
  });
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `tsx src/cli.ts ...args` (node --import tsx: what `npx tsx` runs, without npx's start-up). */
function cli(args: string[], opts: { cwd?: string; timeoutMs?: number } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), ...args], {
      cwd: opts.cwd ?? projectRoot,
      env: { ...process.env, NODE_NO_WARNINGS: '1' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 30_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('llamux CLI', () => {
  let demoModel: string;

  beforeAll(async () => {
    demoModel = (await ensureChatModels()).demo;
  });

  it('prints help for the program and for every command', async () => {
    const [main, serve, demo, inspect, bench] = await Promise.all([
      cli(['--help']),
      cli(['serve', '--help']),
      cli(['demo', '-h']),
      cli(['inspect', '--help']),
      cli(['bench', '--help']),
    ]);
    expect(main.code).toBe(0);
    expect(main.stdout).toMatch(/^Usage: llamux <command> \[options\]/);
    for (const c of ['serve', 'demo', 'inspect', 'doctor', 'bench']) expect(main.stdout).toContain(`  ${c} `);
    expect(serve.stdout).toMatch(/^Usage: llamux serve --model PATH/);
    for (const flag of ['--host', '--port', '--ctx', '--parallel', '--markers', '--api-key', '--cache-ram', '--cache-dir', '--store']) expect(serve.stdout).toContain(flag);
    expect(demo.stdout).toMatch(/^Usage: llamux demo/);
    expect(inspect.stdout).toMatch(/^Usage: llamux inspect MODEL/);
    expect(bench.stdout).toMatch(/^Usage: llamux bench/);
    for (const r of [serve, demo, inspect, bench]) expect(r.code).toBe(0);
  });

  it('exits 2 with a hint for usage errors', async () => {
    const [none, unknown, badFlag, noModel] = await Promise.all([cli([]), cli(['frobnicate']), cli(['serve', '--model', 'x', '--port', 'abc']), cli(['serve'])]);
    expect(none.code).toBe(2);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toBe('llamux: unknown command "frobnicate"\nRun "llamux --help" for usage.\n');
    expect(badFlag.code).toBe(2);
    expect(badFlag.stderr).toMatch(/--port expects an integer ≥ 0, got "abc"/);
    expect(noModel.stderr).toMatch(/serve needs --model PATH/);
    // An empty key would leave the server open without saying so (#15).
    const emptyKey = await cli(['serve', '--model', 'x', '--api-key', '']);
    expect(emptyKey.code).toBe(2);
    expect(emptyKey.stderr).toMatch(/--api-key must not be empty/);
    const badOverflow = await cli(['serve', '--model', 'x', '--overflow', 'drop']);
    expect(badOverflow.code).toBe(2);
    expect(badOverflow.stderr).toMatch(/--overflow must be "error" or "truncate-middle" \(got "drop"\)/);
  });

  it('prints the version', async () => {
    const r = await cli(['--version']);
    const pkg = JSON.parse(readFileSync(join(projectRoot, 'package.json'), 'utf8')) as { version: string };
    expect(r.stdout.trim()).toBe(pkg.version);
  });

  it('inspects a model: metadata and the detected markers preset', async () => {
    const [text, json] = await Promise.all([cli(['inspect', demoModel]), cli(['inspect', demoModel, '--json'])]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^architecture\s+llama$/m);
    expect(text.stdout).toMatch(/^tool-call markers\s+hermes \(<tool_call> … <\/tool_call>\)$/m);
    expect(text.stderr).toContain('Loading model 100%');
    const info = JSON.parse(json.stdout) as Record<string, unknown>;
    expect(info).toMatchObject({ architecture: 'llama', name: 'llamux-scripted-demo', markers: { preset: 'hermes', start: '<tool_call>', end: '</tool_call>' } });
    expect((info.chatTemplate as { length: number }).length).toBeGreaterThan(100);
    const missing = await cli(['inspect', '/nonexistent.gguf']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^llamux: MODEL_NOT_FOUND: /);
  });

  it('demo builds the scripted model once, runs two turns and reports each turn’s cache use', async () => {
    const dir = tempDir('cli-demo');
    const first = await cli(['demo', '--dir', dir]);
    expect(first.code).toBe(0);
    expect(first.stdout).toContain(`Built the scripted demo model: ${join(dir, 'demo.gguf')}`);
    expect(first.stdout).toContain('tool call call_');
    expect(first.stdout).toContain('tool result call_');
    expect(first.stdout).toContain('assistant: The weather in Paris is sunny and 18°C.');
    expect(first.stdout.match(/cache: \d+\/\d+ prompt tokens reused/g)).toHaveLength(2);
    expect(first.stdout).toContain('done: completed after 2 turn(s)');
    const second = await cli(['demo', '--dir', dir, '--json']);
    expect(second.code).toBe(0);
    const events = second.stdout.trim().split('\n').map((l) => JSON.parse(l) as { type: string; report?: Record<string, number>; result?: { status: string } });
    const reports = events.filter((e) => e.type === 'turnEnd').map((e) => e.report!);
    expect(reports).toHaveLength(2);
    expect(reports[1]!.reusedTokens).toBeGreaterThanOrEqual(reports[0]!.promptTokens + reports[0]!.generatedTokens);
    expect(events.at(-1)).toMatchObject({ type: 'done', result: { status: 'completed' } });
  });

  it('serve --cache-dir --store: a conversation survives kill -9 (turn 2 after the restart is a KV hit)', async () => {
    const dir = tempDir('cli-kill9');
    const args = ['--model', demoModel, '--port', '0', '--threads', '1', '--parallel', '1', '--markers', 'hermes', '--cache-dir', join(dir, 'kv'), '--store', join(dir, 'calls.db')];
    const first = await serve(args);
    const client = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0 });
    const turn1 = await client(first.url).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS });
    const call = turn1.choices[0]!.message.tool_calls![0]!;
    const files = () => readdirSync(join(dir, 'kv'), { recursive: true }).filter((f) => String(f).endsWith('.lmxkv'));
    const deadline = Date.now() + 10_000;
    while (files().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await new Promise((resolve) => {
      first.child.on('exit', resolve);
      first.child.kill('SIGKILL');
    });
    expect(files().length).toBeGreaterThan(0);

    const second = await serve(args);
    try {
      const health = (await (await fetch(`${second.url}/health`)).json()) as { cache: { diskEntries: number } };
      expect(health.cache.diskEntries).toBe(files().length); // loaded entries are reported at once
      const turn2 = await client(second.url).chat.completions.create({
        model: 'x',
        messages: weatherTurn2(call as Parameters<typeof weatherTurn2>[0]),
        tools: OPENAI_TOOLS,
      });
      // the stored call replays its exact tokens, so turn 1's whole prompt and output come from disk
      expect(turn2.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(turn1.usage!.prompt_tokens + turn1.usage!.completion_tokens - 1);
    } finally {
      await new Promise((resolve) => {
        second.child.on('exit', resolve);
        second.child.kill('SIGTERM');
      });
    }
  });

  it('serves until SIGTERM, with a progress display while the model loads', async () => {
    const { url, child, stdout, stderr } = await serve(['--model', demoModel, '--port', '0', '--threads', '1', '--parallel', '1', '--markers', 'hermes']);
    expect(stdout()).toContain('markers hermes');
    expect(stderr()).toContain('Loading model 100%');
    const health = (await (await fetch(`${url}/health`)).json()) as { status: string; parallel: number };
    expect(health).toMatchObject({ status: 'ok', parallel: 1 });
    const code = await new Promise<number | null>((resolve) => {
      child.on('close', resolve);
      child.kill('SIGTERM');
    });
    expect(code).toBe(0);
  });

  it('serve --models DIR --models-max --sleep-idle-seconds: router mode, the request\'s model answers', async () => {
    const folder = await poolFolder(['alpha', 'beta']);
    const refusals = Promise.all([cli(['serve', '--model', 'x', '--models', 'y']), cli(['serve', '--model', 'x', '--models-max', '2'])]);
    const { url, child, stdout } = await serve(['--models', folder.dir, '--models-max', '1', '--sleep-idle-seconds', '60', '--port', '0', '--threads', '1', '--parallel', '1', '--tokenize-workers', '1']);
    try {
      expect(stdout()).toContain('(router mode)');
      expect(stdout()).toContain('models alpha, beta; loaded on request, at most 1 at once, unloaded after 60 s idle');
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'beta', messages: [{ role: 'user', content: POOL_QUESTION }], temperature: 0, max_tokens: 32 }),
      });
      expect(((await r.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe(answerOf('beta'));
      const list = (await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ id: string; status: { value: string } }> };
      expect(list.data.map((m) => [m.id, m.status.value])).toEqual([['alpha', 'unloaded'], ['beta', 'loaded']]);
    } finally {
      await new Promise((resolve) => {
        child.on('close', resolve);
        child.kill('SIGTERM');
      });
      folder.remove();
    }
    const [both, stray] = await refusals;
    expect(both.stderr).toMatch(/serve needs --model PATH \(or a model reference\) or --models DIR\|FILE \(one of them\)/);
    expect(stray.stderr).toMatch(/--models-max and --sleep-idle-seconds apply to --models/);
  });
});

describe('parseMarkersArg()', () => {
  it('reads auto, none, presets and START,END', () => {
    expect(parseMarkersArg(undefined)).toBe('auto');
    expect(parseMarkersArg('auto')).toBe('auto');
    expect(parseMarkersArg('none')).toBe(false);
    expect(parseMarkersArg('hermes')).toBe('hermes');
    expect(parseMarkersArg('llama3')).toBe('llama3');
    expect(parseMarkersArg('<a>,</a>')).toEqual({ start: '<a>', end: '</a>' });
    expect(() => parseMarkersArg('bogus')).toThrow(/--markers expects auto, none, one of hermes/);
    expect(() => parseMarkersArg(',x')).toThrow(/--markers expects/);
  });
});

describe('llamux rpc-server', () => {
  it('--help says the protocol has no authentication', async () => {
    const r = await cli(['rpc-server', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('NO authentication');
    expect(r.stdout).toContain('--allow-remote');
  });

  it('refuses a non-loopback host without --allow-remote', async () => {
    const r = await cli(['rpc-server', '--host', '0.0.0.0', '--port', '1']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('refusing to listen on 0.0.0.0');
    expect(r.stderr).toContain('--allow-remote');
  });

  it('rejects --mem (the pinned ggml RPC server cannot limit memory)', async () => {
    const r = await cli(['rpc-server', '--mem', '512']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--mem is not supported');
  });

  it('fails with RPC_UNAVAILABLE when the port is taken, and prints what it exposes when it listens', async () => {
    const { startRpcServer, stopRpcServer } = await import('../helpers/rpc-servers.js');
    const s = await startRpcServer();
    try {
      expect(s.output()).toMatch(/listening on 127\.0\.0\.1:\d+\n {2}device CPU: /);
      expect(s.output()).toContain('no authentication');
      const r = await cli(['rpc-server', '--port', String(s.port)]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('RPC_UNAVAILABLE: cannot listen on 127.0.0.1:');
    } finally {
      await stopRpcServer(s, 'SIGTERM');
    }
    expect(s.child.exitCode).toBe(0);
  });
});

describe('llamux serve --rpc', () => {
  it('exits 1 with RPC_UNAVAILABLE naming the endpoint when an RPC server does not answer', async () => {
    const { freePort } = await import('../helpers/rpc-servers.js');
    const port = await freePort();
    const r = await cli(['serve', '--model', (await ensureChatModels()).demo, '--port', '0', '--rpc', `127.0.0.1:${port}`, '-q']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`RPC_UNAVAILABLE: RPC server 127.0.0.1:${port} is unavailable`);
  });

  it('serves with the layers on an rpc-server and says so', async () => {
    const { startRpcServer, stopRpcServer } = await import('../helpers/rpc-servers.js');
    const s = await startRpcServer();
    const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), 'serve', '--model', (await ensureChatModels()).demo, '--port', '0', '--threads', '1', '--parallel', '1', '--rpc', s.endpoint, '-q'], {
      cwd: projectRoot,
      env: { ...process.env, NODE_NO_WARNINGS: '1' },
    });
    try {
      let stdout = '';
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`serve did not start: ${stdout}`)), 30_000);
        child.stdout.on('data', (d: Buffer) => {
          stdout += d.toString();
          const m = /listening on (http:\/\/\S+)/.exec(stdout);
          if (m && stdout.includes('layers on RPC servers')) {
            clearTimeout(timer);
            resolve(m[1]!);
          }
        });
      });
      expect(stdout).toContain(`layers on RPC servers ${s.endpoint}`);
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], max_tokens: 4 }),
      });
      expect(r.status).toBe(200);
    } finally {
      const code = await new Promise<number | null>((resolve) => {
        child.on('close', resolve);
        child.kill('SIGTERM');
      });
      expect(code).toBe(0);
      await stopRpcServer(s, 'SIGTERM');
    }
  });
});

describe('parseRpcList()', () => {
  it('reads HOST:PORT[,HOST:PORT...] and rejects anything else', () => {
    expect(parseRpcList('127.0.0.1:50052')).toEqual(['127.0.0.1:50052']);
    expect(parseRpcList('a:1, b.lan:50053')).toEqual(['a:1', 'b.lan:50053']);
    expect(() => parseRpcList('')).toThrow(/--rpc expects/);
    expect(() => parseRpcList('host')).toThrow(/"host" is not HOST:PORT/);
    expect(() => parseRpcList('h:70000')).toThrow(/--rpc expects/);
  });
});

describe('llamux doctor', () => {
  it('prints the devices, the CPU variant and, on this GPU-less machine, a CPU plan and why', async () => {
    const model = (await ensureChatModels()).demo;
    const r = await cli(['doctor', '--model', model, '--ctx', '2048']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^cpu {8}\S/m);
    expect(r.stdout).toMatch(/^variant {4}\S+ \((variants|native) build/m);
    expect(r.stdout).toMatch(/^ {2}CPU +cpu +[\d,]+ MiB free of [\d,]+ MiB/m);
    expect(r.stdout).toContain('(no GPU: a CPU-only build, or no GPU driver/device visible to llama.cpp)');
    expect(r.stdout).toMatch(/^plan: CPU only, 0 of \d+ layers offloaded, context 2048 tokens$/m);
    expect(r.stdout).toMatch(/^ {2}- no GPU device: llama\.cpp sees only the CPU/m);

    const j = await cli(['doctor', '--model', model, '--json']);
    expect(j.code, j.stderr).toBe(0);
    const out = JSON.parse(j.stdout) as { system: { devices: Array<{ type: string }> }; plan: { mode: string; gpuLayers: number; contextSize: number; reasons: string[] } };
    expect(out.system.devices.some((d) => d.type === 'cpu')).toBe(true);
    expect(out.plan).toMatchObject({ mode: 'cpu', gpuLayers: 0, contextSize: 4096 });

    const bare = await cli(['doctor']);
    expect(bare.code).toBe(0);
    expect(bare.stdout).not.toContain('plan:');
    const bad = await cli(['doctor', '--model', '/nonexistent.gguf']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('no model file at');
  });
});
