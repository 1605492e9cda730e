// llama.cpp's own llama-server, built from the same pinned llama.cpp source as llamux (the
// bundle in node-llama-cpp 3.21.1), driven through the official `openai` client. It is a peer
// in the replay and throughput suites. Token-id prompts go through `/v1/completions` (the
// OpenAI API accepts a token array as the prompt), so llama-server sees exactly the tokens the
// other systems see; its slot keeps the prompt's KV (`cache_prompt`) between requests.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import OpenAI from 'openai';
import { packageRoot } from '../../src/native/binding.js';
import { progress } from '../report.js';

const cacheDir = join(packageRoot, '.cache');
const srcDir = join(cacheDir, 'llama-server-src');
// Bumped when the configure below changes, so an older build in .cache is configured again.
const BUILD_STAMP = 'amx-no-dse-1';

// The peer is built for the instruction set llamux runs with: -march=native by default, and
// when LLAMUX_CPU_VARIANT forces one of llamux's CPU variants (to measure what an older CPU
// gets), the same ISA for llama-server, in its own build folder.
const PEER_ISA: Record<string, string[]> = {
  x64: ['-DGGML_NATIVE=OFF', '-DGGML_SSE42=OFF', '-DGGML_AVX=OFF', '-DGGML_AVX2=OFF', '-DGGML_FMA=OFF', '-DGGML_F16C=OFF', '-DGGML_BMI2=OFF'],
  haswell: ['-DGGML_NATIVE=OFF', '-DGGML_SSE42=ON', '-DGGML_AVX=ON', '-DGGML_AVX2=ON', '-DGGML_FMA=ON', '-DGGML_F16C=ON', '-DGGML_BMI2=ON'],
};

function peerBuild(): { buildDir: string; binary: string; isa: string[] } {
  const variant = process.env.LLAMUX_CPU_VARIANT;
  const isa = variant ? PEER_ISA[variant] : undefined;
  const buildDir = join(cacheDir, isa ? `llama-server-build-${variant}` : 'llama-server-build');
  return { buildDir, binary: join(buildDir, 'bin', 'llama-server'), isa: isa ?? ['-DGGML_NATIVE=ON'] };
}

// GCC 12 drops stores that fill the AMX tile configuration in ggml's AMX kernels (our own
// CMakeLists.txt compiles that file with -fno-dse for the same reason); without the same
// options llama-server segfaults on its first Q8_0 batch on an AMX CPU. Added through
// CMAKE_PROJECT_INCLUDE and applied once the ggml-cpu target exists; other files untouched.
const AMX_FIX_CMAKE = `cmake_language(DEFER DIRECTORY \${CMAKE_SOURCE_DIR} CALL llamux_amx_no_dse)
function(llamux_amx_no_dse)
  if(TARGET ggml-cpu)
    set_source_files_properties("\${CMAKE_SOURCE_DIR}/ggml/src/ggml-cpu/amx/mmq.cpp" TARGET_DIRECTORY ggml-cpu
      PROPERTIES COMPILE_OPTIONS "-fno-dse;-fno-tree-dse")
  endif()
endfunction()
`;

function builtCurrent({ buildDir, binary }: { buildDir: string; binary: string }): boolean {
  const stampFile = join(buildDir, 'llamux-build-stamp');
  return existsSync(binary) && existsSync(stampFile) && readFileSync(stampFile, 'utf8').trim() === BUILD_STAMP;
}

/** The llama-server binary when it is already built (quick runs never start a build). */
export function builtLlamaServer(): { path?: string; why?: string } {
  const peer = peerBuild();
  return builtCurrent(peer) ? { path: peer.binary } : { why: `not built (${peer.binary}); a full run builds it` };
}

/**
 * The llama-server binary, built on first use (a few minutes: the whole llama.cpp with
 * -march=native or LLAMUX_CPU_VARIANT's ISA, ccache when present). Undefined, with the reason,
 * when it cannot be built.
 */
export function llamaServerBinary(): { path?: string; why?: string } {
  const peer = peerBuild();
  const { buildDir, binary } = peer;
  if (builtCurrent(peer)) return { path: binary };
  const bare = join(cacheDir, 'llama.cpp.git');
  if (!existsSync(bare)) return { why: `no llama.cpp clone at ${bare} (npm run build:native makes it)` };
  progress('llama-server: building it from the pinned llama.cpp (once)');
  mkdirSync(srcDir, { recursive: true });
  const run = (cmd: string, args: string[], cwd = packageRoot) => spawnSync(cmd, args, { cwd, stdio: 'ignore', shell: false });
  if (!existsSync(join(srcDir, 'CMakeLists.txt'))) {
    const r = spawnSync('sh', ['-c', `git --git-dir="${bare}" archive HEAD | tar -x -C "${srcDir}"`], { stdio: 'ignore' });
    if (r.status !== 0) return { why: 'could not export the llama.cpp source' };
  }
  mkdirSync(buildDir, { recursive: true });
  const include = join(buildDir, 'llamux-amx-fix.cmake');
  writeFileSync(include, AMX_FIX_CMAKE);
  const launcher = spawnSync('sh', ['-c', 'command -v ccache'], { stdio: 'ignore' }).status === 0 ? ['-DCMAKE_C_COMPILER_LAUNCHER=ccache', '-DCMAKE_CXX_COMPILER_LAUNCHER=ccache'] : [];
  // No download at build time: the web UI is neither built nor fetched; no curl, no OpenSSL.
  const conf = run('cmake', ['-S', srcDir, '-B', buildDir, '-G', 'Ninja', '-DCMAKE_BUILD_TYPE=Release', '-DLLAMA_BUILD_SERVER=ON', '-DLLAMA_BUILD_TOOLS=ON',
    '-DLLAMA_BUILD_TESTS=OFF', '-DLLAMA_BUILD_EXAMPLES=OFF', '-DLLAMA_BUILD_UI=OFF', '-DLLAMA_USE_PREBUILT_UI=OFF', '-DLLAMA_OPENSSL=OFF', '-DLLAMA_CURL=OFF',
    ...peer.isa, `-DCMAKE_PROJECT_INCLUDE=${include}`, ...launcher]);
  if (conf.status !== 0) return { why: 'cmake could not configure llama-server' };
  const build = run('ninja', ['-C', buildDir, 'llama-server']);
  if (build.status !== 0 || !existsSync(binary)) return { why: 'llama-server did not build' };
  writeFileSync(join(buildDir, 'llamux-build-stamp'), BUILD_STAMP + '\n');
  return { path: binary };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export interface LlamaServerOptions {
  ctx: number;
  parallel: number;
  threads: number;
  /** More command-line arguments (e.g. --reasoning-format). */
  extraArgs?: string[];
  /** Every piece of its log (stderr) as it comes (the multimodal suite reads its encode times). */
  onStderr?: (text: string) => void;
}

export interface LlamaServerHandle {
  openai: OpenAI;
  url: string;
  close(): Promise<void>;
}

export async function startLlamaServer(bin: string, model: string, o: LlamaServerOptions): Promise<LlamaServerHandle> {
  const port = await freePort();
  const child: ChildProcess = spawn(bin, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '-c', String(o.ctx), '-np', String(o.parallel),
    '-t', String(o.threads), '-tb', String(o.threads), '-b', '512', '--no-warmup', ...(o.extraArgs ?? [])], {
    stdio: ['ignore', 'ignore', 'pipe'],
    // Its shared libraries sit beside it; the build's RUNPATH is absolute, so a .cache copied
    // from another checkout would otherwise load none of them.
    env: { ...process.env, LD_LIBRARY_PATH: [dirname(bin), process.env.LD_LIBRARY_PATH].filter(Boolean).join(':') },
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    o.onStderr?.(d.toString());
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`llama-server exited: ${stderr}`);
    try {
      const r = await fetch(`${url}/health`);
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`llama-server did not become ready: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    openai: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 600_000 }),
    close: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

export interface CompletionRun {
  /** Client-side arrival time of each streamed token, ms from the request start. */
  tokenTimesMs: number[];
  ttftMs: number;
  totalMs: number;
  /** Prompt tokens llama-server evaluated (its `timings.prompt_n`), -1 when not reported. */
  prefilledTokens: number;
}

/** One streamed `/v1/completions` request with a token-id prompt; llama-server-only fields go in `extra`. */
export async function streamTokenCompletion(openai: OpenAI, prompt: ArrayLike<number>, maxTokens: number, extra: Record<string, unknown>, t0 = performance.now()): Promise<CompletionRun> {
  const body = { model: 'llama-server', prompt: Array.from(prompt), max_tokens: maxTokens, temperature: 0, stream: true, cache_prompt: true, ...extra };
  const stream = (await openai.completions.create(body as never)) as unknown as AsyncIterable<Record<string, unknown>>;
  const times: number[] = [];
  let prefilled = -1;
  for await (const chunk of stream) {
    const choices = chunk.choices as Array<{ text?: string }> | undefined;
    if (choices && choices.length > 0 && choices[0]!.text !== undefined && chunk.timings === undefined) times.push(performance.now() - t0);
    const timings = chunk.timings as { prompt_n?: number } | undefined;
    if (timings?.prompt_n !== undefined) prefilled = timings.prompt_n;
  }
  return { tokenTimesMs: times, ttftMs: times[0] ?? NaN, totalMs: performance.now() - t0, prefilledTokens: prefilled };
}

/** One greedy `/completion` of a token prompt on a fresh llama-server (one slot, `extraArgs` added), after a warm-up run: its decode tok/s and draft counters from its own timings, and whether it wrote `expect`. */
export async function llamaServerGreedyRun(
  bin: string,
  model: string,
  prompt: number[],
  expect: number[],
  threads: number,
  extraArgs: string[],
): Promise<{ decode: number; drafted: number; accepted: number; exact: boolean }> {
  const srv = await startLlamaServer(bin, model, { ctx: prompt.length + expect.length + 64, parallel: 1, threads, extraArgs });
  try {
    const body = { prompt, n_predict: expect.length, temperature: 0, cache_prompt: false, ignore_eos: true, return_tokens: true };
    const once = async () => (await (await fetch(`${srv.url}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json()) as {
      tokens?: number[];
      timings?: { predicted_per_second?: number; draft_n?: number; draft_n_accepted?: number };
    };
    await once(); // warm-up: graphs of every batch shape
    const r = await once();
    const tokens = r.tokens ?? [];
    return {
      decode: r.timings?.predicted_per_second ?? NaN,
      drafted: r.timings?.draft_n ?? 0,
      accepted: r.timings?.draft_n_accepted ?? 0,
      exact: tokens.length === expect.length && tokens.every((t, i) => t === expect[i]),
    };
  } finally {
    await srv.close();
  }
}
