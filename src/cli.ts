#!/usr/bin/env node
// `llamux`: serve, run, demo, inspect, doctor, bench, rpc-server, pull, ls, rm.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { Agent, type AgentEvent } from './agent/index.js';
import { fromNative, isLlamuxError } from './errors.js';
import { MARKER_PRESETS, detectMarkerPreset } from './engine/markers.js';
import { UsageError, intArg, parseGpuMemory, parseMarkersArg, parsePromptCacheTtl, parseRpcList, progressPrinter, specArgs, takeLoraScaled } from './cli/args.js';

export { parseMarkersArg, parseRpcList } from './cli/args.js';
import { loadModel, planForFile } from './model/load.js';
import type { Model } from './model/model.js';
import type { FitPlan } from './model/fit.js';
import { printDoctor } from './cli/doctor.js';
import { run } from './cli/run.js';
import { lsCommand, modelArgument, pullCommand, rmCommand } from './cli/models.js';
import { systemInfo } from './native/system-info.js';
import { createServer } from './server/index.js';
import { defineTool } from './tools/tool.js';
import { setLogger } from './logger.js';
import { BENCH_HELP, DEMO_HELP, DOCTOR_HELP, INSPECT_HELP, MAIN_HELP, RPC_SERVER_HELP, SERVE_HELP } from './cli/help.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

function parse<T extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: T, allowPositionals = false) {
  try {
    return parseArgs({ args, options: { help: { type: 'boolean', short: 'h' }, ...options }, allowPositionals, strict: true });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

async function serve(argv: string[]): Promise<void> {
  const { rest: args, scaled } = takeLoraScaled(argv);
  const { values } = parse(args, {
    model: { type: 'string', short: 'm' },
    models: { type: 'string' },
    'models-max': { type: 'string' },
    'sleep-idle-seconds': { type: 'string' },
    host: { type: 'string' },
    port: { type: 'string' },
    ctx: { type: 'string' },
    parallel: { type: 'string' },
    threads: { type: 'string' },
    markers: { type: 'string' },
    'api-key': { type: 'string', multiple: true },
    'allowed-host': { type: 'string', multiple: true },
    'isolate-tenants': { type: 'boolean' },
    deterministic: { type: 'boolean' },
    spec: { type: 'string' },
    'spec-draft-max': { type: 'string' },
    'draft-model': { type: 'string' },
    'max-prompt-bytes': { type: 'string' },
    overflow: { type: 'string' },
    'context-shift': { type: 'boolean' },
    'keep-reasoning': { type: 'boolean' },
    'tokenize-timeout': { type: 'string' },
    'tokenize-workers': { type: 'string' },
    'max-queued': { type: 'string' },
    'max-connections': { type: 'string' },
    'headers-timeout': { type: 'string' },
    'request-timeout': { type: 'string' },
    'keep-alive-timeout': { type: 'string' },
    'send-timeout': { type: 'string' },
    'session-ttl': { type: 'string' },
    'cache-ram': { type: 'string' },
    'cache-dir': { type: 'string' },
    'prompt-cache-ttl': { type: 'string' },
    store: { type: 'string' },
    'chat-template': { type: 'string' },
    'max-body': { type: 'string' },
    rpc: { type: 'string' },
    lora: { type: 'string', multiple: true },
    mmproj: { type: 'string' },
    'allow-remote-media': { type: 'boolean' },
    quiet: { type: 'boolean', short: 'q' },
  });
  if (values.help) {
    console.log(SERVE_HELP);
    return;
  }
  if ((values.model === undefined) === (values.models === undefined)) throw new UsageError('serve needs --model PATH (or a model reference) or --models DIR|FILE (one of them)');
  if (values.models === undefined && (values['models-max'] !== undefined || values['sleep-idle-seconds'] !== undefined)) {
    throw new UsageError('--models-max and --sleep-idle-seconds apply to --models');
  }
  const apiKeys = values['api-key'] ?? (process.env.LLAMUX_API_KEY !== undefined ? [process.env.LLAMUX_API_KEY] : []);
  // An empty key would silently leave the server open: refuse it.
  if (apiKeys.some((k) => k.trim() === '')) throw new UsageError(`${values['api-key'] ? '--api-key' : 'LLAMUX_API_KEY'} must not be empty (leave it out to run without a key)`);
  const apiKey = apiKeys.length === 0 ? undefined : apiKeys.length === 1 ? apiKeys[0]! : apiKeys;
  const overflowArg = (v: string): 'error' | 'truncate-middle' => {
    if (v !== 'error' && v !== 'truncate-middle') throw new UsageError(`--overflow must be "error" or "truncate-middle" (got ${JSON.stringify(v)})`);
    return v;
  };
  const limits = {
    maxPromptBytes: intArg(values['max-prompt-bytes'], 'max-prompt-bytes', 1),
    tokenizeTimeoutMs: intArg(values['tokenize-timeout'], 'tokenize-timeout', 1),
    tokenizeWorkers: intArg(values['tokenize-workers'], 'tokenize-workers', 1),
    maxQueued: intArg(values['max-queued'], 'max-queued', 0),
    maxConnections: intArg(values['max-connections'], 'max-connections', 1),
    headersTimeoutMs: intArg(values['headers-timeout'], 'headers-timeout', 1),
    requestTimeoutMs: intArg(values['request-timeout'], 'request-timeout', 1),
    keepAliveTimeoutMs: intArg(values['keep-alive-timeout'], 'keep-alive-timeout', 1),
    sendTimeoutMs: intArg(values['send-timeout'], 'send-timeout', 1),
    sessionTtlMs: intArg(values['session-ttl'], 'session-ttl', 1),
  };
  const progress = progressPrinter('Loading model', values.quiet ?? false);
  const port = intArg(values.port, 'port', 0);
  const ctx = intArg(values.ctx, 'ctx', 64);
  const parallel = intArg(values.parallel, 'parallel', 1);
  const threads = intArg(values.threads, 'threads', 1);
  const cacheRamMb = intArg(values['cache-ram'], 'cache-ram', 0);
  const maxBodyBytes = intArg(values['max-body'], 'max-body', 1);
  const modelsMax = intArg(values['models-max'], 'models-max', 0);
  const sleepIdle = values['sleep-idle-seconds'];
  if (sleepIdle !== undefined && !(/^\d+(\.\d+)?$/.test(sleepIdle) && Number(sleepIdle) > 0)) throw new UsageError(`--sleep-idle-seconds expects a number of seconds > 0, got "${sleepIdle}"`);
  // --model: a path, or a reference (org/repo:QUANT): the pulled model, pulled first if missing.
  const server = await createServer({
    ...(values.models !== undefined
      ? { models: values.models, ...(modelsMax !== undefined ? { modelsMax } : {}), ...(sleepIdle !== undefined ? { sleepIdleSeconds: Number(sleepIdle) } : {}) }
      : { modelPath: await modelArgument(values.model!, values.quiet ?? false) }),
    ...(values.host !== undefined ? { host: values.host } : {}),
    ...(port !== undefined ? { port } : {}),
    ...(ctx !== undefined ? { ctx } : {}),
    ...(parallel !== undefined ? { parallel } : {}),
    ...(threads !== undefined ? { threads } : {}),
    markers: parseMarkersArg(values.markers),
    ...(apiKey !== undefined ? { apiKey } : {}),
    ...(values['allowed-host'] ? { allowedHosts: values['allowed-host'] } : {}),
    ...(values['isolate-tenants'] ? { isolateTenants: true } : {}),
    ...(values['context-shift'] ? { contextShift: true } : {}),
    ...(values['keep-reasoning'] ? { keepReasoning: true } : {}),
    ...(values.deterministic ? { deterministic: true } : {}),
    ...(values.overflow !== undefined ? { overflow: overflowArg(values.overflow) } : {}),
    ...specArgs(values.spec, values['spec-draft-max'], values['draft-model']),
    ...Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== undefined)),
    ...(cacheRamMb !== undefined ? { cacheRamMb } : {}),
    ...(values['cache-dir'] !== undefined ? { cacheDir: values['cache-dir'] } : {}),
    ...(values['prompt-cache-ttl'] !== undefined ? { promptCacheTtlMs: parsePromptCacheTtl(values['prompt-cache-ttl']) } : {}),
    ...(values.store !== undefined ? { storePath: values.store } : {}),
    ...(values['chat-template'] !== undefined ? { chatTemplate: readFileSync(values['chat-template'], 'utf8') } : {}),
    ...(maxBodyBytes !== undefined ? { maxBodyBytes } : {}),
    ...(values.rpc !== undefined ? { rpcServers: parseRpcList(values.rpc) } : {}),
    ...(values.lora || scaled.length ? { lora: [...(values.lora ?? []), ...scaled] } : {}),
    ...(values.mmproj !== undefined ? { projector: values.mmproj } : {}),
    ...(values['allow-remote-media'] ? { allowRemoteMedia: true } : {}),
    // Router mode logs each model's load (the server's log) instead of a progress line.
    ...(values.models === undefined ? { onProgress: progress.onProgress } : {}),
  });
  progress.done();
  if (server.pool) {
    const pinned = server.pool.status().filter((s) => s.pinned).map((s) => s.name);
    console.log(
      [
        `llamux listening on ${server.url} (router mode)`,
        `  models ${server.pool.names.join(', ')}${pinned.length ? ` (pinned, loaded: ${pinned.join(', ')})` : ''}; loaded on request, at most ${modelsMax ?? 4}${modelsMax === 0 ? ' (no limit)' : ''} at once${sleepIdle !== undefined ? `, unloaded after ${sleepIdle} s idle` : ''}${apiKey !== undefined ? ', API key required' : ''}`,
        `  OpenAI: ${server.url}/v1   Anthropic: ${server.url}`,
      ].join('\n'),
    );
  } else {
    const m = server.context.markers;
    const markers = m ? (m.preset ?? `${server.model.detokenize(m.start, { special: true })},${server.model.detokenize(m.end, { special: true })}`) : 'none';
    console.log(
      [
        `llamux listening on ${server.url}`,
        ...(server.model.rpc ? [`  layers on RPC servers ${server.model.rpc.servers.join(', ')}`] : []),
        `  model ${server.model.path}, context ${server.context.settings.contextSize} tokens, ${server.context.settings.sequences} parallel, markers ${markers}${apiKey !== undefined ? ', API key required' : ''}${values['isolate-tenants'] ? ', tenants isolated' : ''}`,
        `  OpenAI: ${server.url}/v1   Anthropic: ${server.url}`,
      ].join('\n'),
    );
  }
  // SIGTERM / Ctrl-C: stop within 5 s whatever is running. close() answers or aborts the
  // requests in flight and stops the prompt workers (their tokenizer calls stop between bounded
  // pieces); should it still be busy after 4.5 s, or at a second signal, the process is killed.
  let stopping = false;
  const stop = (): void => {
    if (stopping) {
      console.error('llamux: second signal; exiting now');
      process.kill(process.pid, 'SIGKILL');
      return;
    }
    stopping = true;
    console.log('shutting down');
    const hard = setTimeout(() => {
      console.error('llamux: shutting down took over 4.5 s; exiting now');
      process.kill(process.pid, 'SIGKILL');
    }, 4500);
    server.close().then(
      () => {
        clearTimeout(hard);
        process.exit(0);
      },
      () => {
        clearTimeout(hard);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

function describeEvent(ev: AgentEvent): string | undefined {
  switch (ev.type) {
    case 'turnStart':
      return `\n— turn ${ev.turn}: prompt ${ev.promptTokens} tokens${ev.replayedCalls.length ? `, ${ev.replayedCalls.length} tool call(s) replayed as exact tokens` : ''}`;
    case 'text':
      return undefined;
    case 'toolCallStart':
      return undefined;
    case 'toolCallDelta':
      return undefined;
    case 'toolCall':
      return `  tool call ${ev.call.id}: ${ev.call.name}(${JSON.stringify(ev.call.arguments)})`;
    case 'toolCallTruncated':
      return `  tool call cut off (not run): ${ev.text}`;
    case 'turnEnd': {
      const r = ev.report;
      const lines = [];
      if (ev.text) lines.push(`  assistant: ${ev.text}`);
      lines.push(
        `  cache: ${r.reusedTokens}/${r.promptTokens} prompt tokens reused, ${r.prefilledTokens} prefilled, ${r.generatedTokens} generated, first token after ${r.ttftMs.toFixed(1)} ms (${r.finishReason})`,
      );
      return lines.join('\n');
    }
    case 'toolResult':
      return `  tool result ${ev.toolCallId}: ${ev.content}${ev.isError ? ' (error)' : ''}`;
    case 'askUser':
      return `  the tool asks: ${ev.question}`;
    case 'awaitingTools':
      return `  waiting for ${ev.calls.length} manual tool call(s)`;
    case 'done':
      return `\ndone: ${ev.result.status} after ${ev.result.turns.length} turn(s)`;
  }
}

async function demo(args: string[]): Promise<void> {
  const { values } = parse(args, { dir: { type: 'string' }, json: { type: 'boolean' } });
  if (values.help) {
    console.log(DEMO_HELP);
    return;
  }
  const dir = resolve(values.dir ?? join(process.cwd(), '.cache', 'demo'));
  const json = values.json ?? false;
  const log = (s: string): void => {
    if (!json) console.log(s);
  };
  const existed = existsSync(join(dir, 'demo.gguf'));
  // The fixture generators ('llamux/testing') load only for the demo model.
  const { ensureTestModels } = await import('./gguf/fixtures.js');
  const models = await ensureTestModels(dir, ['demo']);
  log(`${existed ? 'Using' : 'Built'} the scripted demo model: ${models.demo.path}`);
  const model = await loadModel(models.demo.path);
  try {
    // A tiny model: one thread decodes it faster than several would.
    const ctx = await model.createContext({ contextSize: 4096, sequences: 2, threads: 1 });
    const weather = defineTool({
      name: 'get_weather',
      description: 'Current weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      handler: (_args) => ({ temperature: 18, condition: 'sunny' }),
    });
    const agent = new Agent({ context: ctx, tools: [weather], generate: { temperature: 0, maxTokens: 64 } });
    const question = 'What is the weather in Paris?';
    log(`user: ${question}`);
    for await (const ev of agent.stream([{ role: 'user', content: question }])) {
      if (json) {
        const { state: _state, ...rest } = ev.type === 'done' ? ev.result : ({} as { state?: unknown });
        console.log(JSON.stringify(ev.type === 'done' ? { type: 'done', result: rest } : ev));
        continue;
      }
      const line = describeEvent(ev);
      if (line !== undefined) console.log(line);
    }
  } finally {
    await model.dispose();
  }
}

async function inspect(args: string[]): Promise<void> {
  const { values, positionals } = parse(args, { json: { type: 'boolean' }, template: { type: 'boolean' } }, true);
  if (values.help) {
    console.log(INSPECT_HELP);
    return;
  }
  if (positionals.length !== 1) throw new UsageError('inspect needs exactly one MODEL path');
  const progress = progressPrinter('Loading model', values.json ?? false);
  let model: Model;
  try {
    model = await loadModel(positionals[0]!, { onProgress: progress.onProgress });
  } finally {
    progress.done();
  }
  try {
    const md = model.metadata;
    const v = model.vocab;
    const preset = detectMarkerPreset(model);
    const tokenText = (id: number): string | null => (id >= 0 && id < v.size ? model.tokenInfo(id).text : null);
    const info = {
      path: model.path,
      name: md.name ?? null,
      architecture: md.architecture,
      parameters: md.parameters,
      sizeBytes: md.sizeBytes,
      trainingContextSize: md.trainingContextSize,
      layers: md.layers,
      embeddingSize: md.embeddingSize,
      heads: md.heads,
      kvHeads: md.kvHeads,
      recurrent: md.isRecurrent,
      hybrid: md.isHybrid,
      fingerprint: md.fingerprint,
      vocab: { type: v.type, size: v.size, bos: tokenText(v.bos), eos: tokenText(v.eos), eot: tokenText(v.eot), addBos: v.addBos },
      chatTemplate: md.chatTemplate === null ? null : { length: md.chatTemplate.length, firstLine: md.chatTemplate.split('\n')[0]!.slice(0, 100) },
      markers: preset ? { preset, ...MARKER_PRESETS[preset] } : null,
    };
    if (values.json) {
      console.log(JSON.stringify(values.template ? { ...info, chatTemplate: md.chatTemplate } : info, null, 2));
      return;
    }
    const rows: Array<[string, string]> = [
      ['path', info.path],
      ['name', info.name ?? '(none)'],
      ['architecture', info.architecture],
      ['parameters', info.parameters.toLocaleString('en-US')],
      ['size', `${(info.sizeBytes / 1024 / 1024).toFixed(1)} MiB`],
      ['context (trained)', String(info.trainingContextSize)],
      ['layers / embd / heads / kv heads', `${info.layers} / ${info.embeddingSize} / ${info.heads} / ${info.kvHeads}`],
      ['vocab', `${info.vocab.size} tokens (type ${info.vocab.type}), bos ${info.vocab.bos ?? '-'}, eos ${info.vocab.eos ?? '-'}`],
      ['chat template', info.chatTemplate ? `${info.chatTemplate.length} chars: ${info.chatTemplate.firstLine}` : '(none: llamux uses ChatML)'],
      ['tool-call markers', info.markers ? `${info.markers.preset} (${info.markers.start} … ${info.markers.end})` : 'none detected (pass --markers START,END to serve)'],
      ['fingerprint', info.fingerprint],
    ];
    const w = Math.max(...rows.map((r) => r[0].length));
    for (const [k, val] of rows) console.log(`${k.padEnd(w)}  ${val}`);
    if (values.template && md.chatTemplate) console.log(`\n${md.chatTemplate}`);
  } finally {
    await model.dispose();
  }
}

/** `llamux doctor`: the devices, their free memory, the CPU variant, and the plan for a model. */
async function doctor(args: string[]): Promise<void> {
  const { values, positionals } = parse(args, {
    model: { type: 'string', short: 'm' },
    ctx: { type: 'string' },
    parallel: { type: 'string' },
    'gpu-memory': { type: 'string' },
    'cpu-moe': { type: 'boolean' },
    'n-cpu-moe': { type: 'string' },
    json: { type: 'boolean' },
  });
  if (values.help) {
    console.log(DOCTOR_HELP);
    return;
  }
  if (positionals.length > 0) throw new UsageError(`doctor takes no positional arguments (use --model PATH)`);
  const ctx = intArg(values.ctx, 'ctx', 1);
  const parallel = intArg(values.parallel, 'parallel', 1);
  const nCpuMoe = intArg(values['n-cpu-moe'], 'n-cpu-moe', 0);
  if (values['cpu-moe'] && nCpuMoe !== undefined) throw new UsageError('give --cpu-moe or --n-cpu-moe, not both');
  const moe = values['cpu-moe'] ? ('all' as const) : nCpuMoe;
  const info = systemInfo();
  const gpuMemory = values['gpu-memory'] === undefined ? undefined : parseGpuMemory(values['gpu-memory']);
  if (values.model === undefined && (gpuMemory || moe !== undefined)) throw new UsageError('--gpu-memory, --cpu-moe and --n-cpu-moe plan for a model: give --model PATH');
  let plan: FitPlan | undefined;
  if (values.model !== undefined) {
    const path = resolve(values.model);
    if (!existsSync(path)) throw new UsageError(`no model file at "${path}"`);
    plan = await planForFile(path, {
      ...(ctx !== undefined ? { contextSize: ctx } : {}),
      ...(parallel !== undefined ? { sequences: parallel } : {}),
      ...(moe !== undefined ? { nCpuMoe: moe } : {}),
      // Assumed GPUs replace the ones llama.cpp sees; the CPU stays as it is.
      ...(gpuMemory ? { devices: [...info.devices.filter((d) => d.type === 'cpu'), ...gpuMemory] } : {}),
    });
    if (!plan) throw new UsageError(`cannot read a GGUF header with layers from "${path}"`);
  }
  printDoctor(info, plan, values.model !== undefined ? resolve(values.model) : undefined, values.json === true);
}

async function bench(args: string[]): Promise<void> {
  if (args.length === 1 && (args[0] === '--help' || args[0] === '-h')) {
    console.log(BENCH_HELP);
    return;
  }
  const entry = join(ROOT, 'bench', 'index.ts');
  if (!existsSync(entry)) {
    console.log('The benchmarks are not in this installation. Clone the llamux repository and run "npm run bench" (or "npx llamux bench") there.');
    return;
  }
  const code = await new Promise<number>((res) => {
    const child = spawn(process.execPath, ['--import', 'tsx', entry, ...args], { cwd: ROOT, stdio: 'inherit' });
    child.on('exit', (c, signal) => res(c ?? (signal ? 1 : 0)));
    child.on('error', () => res(1));
  });
  process.exitCode = code;
}

const LOOPBACK = /^127\.\d+\.\d+\.\d+$/;

async function rpcServer(args: string[]): Promise<void> {
  const { values } = parse(args, {
    host: { type: 'string' },
    port: { type: 'string' },
    threads: { type: 'string' },
    'cache-dir': { type: 'string' },
    'allow-remote': { type: 'boolean' },
    mem: { type: 'string' },
  });
  if (values.help) {
    console.log(RPC_SERVER_HELP);
    return;
  }
  if (values.mem !== undefined) {
    throw new UsageError('--mem is not supported: the pinned ggml RPC server reports the device\'s own free memory; balance layers with the client\'s tensorSplit');
  }
  // ggml's server binds an IPv4 address literal only.
  const host = values.host === undefined || values.host === 'localhost' ? '127.0.0.1' : values.host;
  if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(host)) throw new UsageError(`--host expects an IPv4 address (e.g. 127.0.0.1 or 10.0.0.7), got "${host}"`);
  if (!LOOPBACK.test(host) && !values['allow-remote']) {
    throw new UsageError(`refusing to listen on ${host}: the RPC protocol has no authentication. Use a private network or a tunnel, and pass --allow-remote`);
  }
  const port = intArg(values.port, 'port', 1) ?? 50052;
  if (port > 65535) throw new UsageError('--port must be 1..65535');
  const threads = intArg(values.threads, 'threads', 1);
  const cacheDir = values['cache-dir'] !== undefined ? resolve(values['cache-dir']) : undefined;
  if (cacheDir) mkdirSync(cacheDir, { recursive: true });
  const { native } = await import('./native/binding.js');
  let info;
  try {
    info = native.startRpcServer({ host, port, ...(threads !== undefined ? { threads } : {}), ...(cacheDir ? { cacheDir } : {}) }, () => {
      console.error('llamux: the RPC server stopped');
      process.exit(1);
    });
  } catch (e) {
    throw fromNative(e);
  }
  const mib = (n: number) => `${Math.round(n / 1024 / 1024)} MiB`;
  console.log(
    [
      `llamux rpc-server listening on ${info.endpoint}`,
      ...info.devices.map((d) => `  device ${d.name}: ${d.description} (${mib(d.memoryTotal)}, ${mib(d.memoryFree)} free)`),
      `  threads ${threads ?? 'all'}${cacheDir ? `, tensor cache ${cacheDir}` : ''}`,
      '  no authentication: expose it on a private network or through an SSH/WireGuard tunnel only',
    ].join('\n'),
  );
  // The server runs on a native thread; keep the process alive until a signal.
  const keepAlive = setInterval(() => {}, 1 << 30);
  const stop = (): void => {
    clearInterval(keepAlive);
    console.log('shutting down');
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

function version(): string {
  try {
    return (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

export async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '-h' || command === '--help' || command === 'help') {
    if (command === 'help' && rest[0]) return main([rest[0], '--help']);
    console.log(MAIN_HELP);
    if (command === undefined) process.exitCode = 2;
    return;
  }
  if (command === '-v' || command === '--version') {
    console.log(version());
    return;
  }
  const run = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (!run) throw new UsageError(`unknown command "${command}"`);
  return run(rest);
}

const COMMANDS: Record<string, (args: string[]) => Promise<void>> = {
  serve,
  run,
  'rpc-server': rpcServer,
  demo,
  inspect,
  bench,
  doctor,
  pull: pullCommand,
  ls: lsCommand,
  rm: rmCommand,
};

const invokedDirectly = (() => {
  try {
    const self = realpathSync(fileURLToPath(import.meta.url));
    const argv1 = process.argv[1] ? realpathSync(resolve(process.argv[1])) : '';
    return argv1 === self;
  } catch {
    return false;
  }
})();

if (invokedDirectly) {
  setLogger('error');
  main(process.argv.slice(2)).catch((e: unknown) => {
    if (e instanceof UsageError) {
      console.error(`llamux: ${e.message}\nRun "llamux --help" for usage.`);
      process.exitCode = 2;
      return;
    }
    console.error(`llamux: ${isLlamuxError(e) ? `${e.code}: ${e.message}` : e instanceof Error ? e.message : String(e)}`);
    process.exitCode = 1;
  });
}
