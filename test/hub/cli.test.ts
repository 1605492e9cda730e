import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli.js';
import { UsageError } from '../../src/cli/args.js';
import { modelArgument } from '../../src/cli/models.js';
import { PullProgressBar } from '../../src/cli/progress-bar.js';
import { isLlamuxError, pull } from '../../src/index.js';
import { encodeGguf } from '../../src/gguf/index.js';
import { buildTestModel } from '../../src/gguf/fixtures.js';
import { projectRoot, tempDir } from '../helpers/paths.js';
import { sha256, startFakeHub, type FakeHub } from './hub-server.js';

let hub: FakeHub;
let demo: Uint8Array;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `llamux ...args` (tsx src/cli.ts, as test/cli does) with the fake hub and a models folder. */
function cli(args: string[], dir: string): Promise<Run> {
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_NO_WARNINGS: '1', LLAMUX_MODELS_DIR: dir, LLAMUX_HF_ENDPOINT: hub.url };
  delete env.HF_TOKEN;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), ...args], { cwd: projectRoot, env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

beforeAll(async () => {
  hub = await startFakeHub();
  demo = encodeGguf(buildTestModel('demo').gguf);
  hub.addRepo('acme/Demo-GGUF', { 'Demo-Q4_K_M.gguf': demo, 'Demo-Q8_0.gguf': demo.subarray(0, 200_000), 'README.md': new Uint8Array([35, 10]) });
});

afterAll(() => hub?.close());

describe('llamux pull / ls / rm', () => {
  // Each CLI process costs about a second (several on a loaded machine): the exit codes, the
  // streams and the files are checked through processes, the remaining cases through main().
  it('pull prints the path (plain progress lines when stderr is not a terminal), ls lists it, rm removes it', async () => {
    const dir = tempDir('cli-pull');
    const pulled = await cli(['pull', 'acme/Demo-GGUF:q4_k_m'], dir);
    const kib = `${(demo.length / 1024).toFixed(1)} KiB`;
    expect(pulled.stderr).toBe(`Demo-Q4_K_M.gguf: ${kib}\npulled acme/Demo-GGUF:Q4_K_M (1 file, ${kib})\n`);
    expect(pulled.code).toBe(0);
    const path = join(dir, 'hf', 'acme', 'Demo-GGUF', 'Demo-Q4_K_M.gguf');
    expect(pulled.stdout).toBe(`${path}\n`);
    expect(sha256(readFileSync(path))).toBe(sha256(demo));

    await pull('acme/Demo-GGUF:Q8_0', { modelsDir: dir, endpoint: hub.url, token: '' });
    const ls = await cli(['ls'], dir);
    expect(ls.code).toBe(0);
    expect(ls.stdout.split('\n')).toEqual([
      'NAME            QUANT   SIZE       PATH',
      `acme/Demo-GGUF  Q4_K_M  ${kib.padEnd(9)}  ${path}`,
      `acme/Demo-GGUF  Q8_0    195.3 KiB  ${join(dir, 'hf', 'acme', 'Demo-GGUF', 'Demo-Q8_0.gguf')}`,
      '',
    ]);
    const rm = await cli(['rm', 'acme/Demo-GGUF:Q4_K_M'], dir);
    expect(rm.code).toBe(0);
    expect(rm.stdout).toBe(`removed acme/Demo-GGUF:Q4_K_M (1 file, ${kib})\n`);
    expect(existsSync(path)).toBe(false);
    expect(existsSync(join(dir, 'hf', 'acme', 'Demo-GGUF', 'Demo-Q8_0.gguf'))).toBe(true);
  });

  it('ls --json, rm of nothing pulled, an unknown tag, usage errors and bad references (through main())', async () => {
    const dir = tempDir('cli-main');
    await pull('acme/Demo-GGUF:Q8_0', { modelsDir: dir, endpoint: hub.url, token: '' });
    const out = async (argv: string[]): Promise<string> => {
      const lines: string[] = [];
      const spy = vi.spyOn(console, 'log').mockImplementation((s: unknown) => void lines.push(String(s)));
      try {
        await main(argv);
      } finally {
        spy.mockRestore();
      }
      return lines.join('\n');
    };
    const failure = (argv: string[]): Promise<Error> => main(argv).then(() => { throw new Error('expected a failure'); }, (e: Error) => e);
    expect(await out(['pull', '--help'])).toMatch(/^Usage: llamux pull REFERENCE \[options\][\s\S]*HF_TOKEN[\s\S]*--mmproj/);
    expect(await out(['ls', '-h'])).toMatch(/^Usage: llamux ls/);
    expect(await out(['rm', '--help'])).toMatch(/^Usage: llamux rm REFERENCE/);
    expect(await out(['--help'])).toMatch(/\n {2}pull {8}Download a model[\s\S]*\n {2}ls {10}List the pulled models\n {2}rm {10}Remove a pulled model\n/);
    expect((JSON.parse(await out(['ls', '--json', '--models-dir', dir])) as Array<{ reference: string; files: unknown[] }>).map((m) => m.reference)).toEqual(['acme/Demo-GGUF:Q8_0']);
    const empty = tempDir('cli-main-empty');
    expect(await out(['ls', '--models-dir', empty])).toBe(`no models pulled (models folder ${empty})`);
    const nothing = await failure(['rm', 'acme/Demo-GGUF:Q4_K_M', '--models-dir', dir]);
    expect(isLlamuxError(nothing, 'MODEL_NOT_FOUND')).toBe(true);
    expect(nothing.message).toBe('No pulled model matches "acme/Demo-GGUF:Q4_K_M"; pulled: acme/Demo-GGUF:Q8_0');
    const tag = await failure(['pull', 'acme/Demo-GGUF:Q5_K_M', '--models-dir', dir, '--endpoint', hub.url]);
    expect(isLlamuxError(tag, 'MODEL_NOT_FOUND')).toBe(true);
    expect(tag.message).toBe('acme/Demo-GGUF has no quant "Q5_K_M"; available: Q4_K_M, Q8_0');
    const bad = await failure(['pull', 'acme/Demo-GGUF/../x.gguf', '--models-dir', dir]);
    expect(isLlamuxError(bad, 'INVALID_ARGUMENT')).toBe(true);
    expect(bad.message).toMatch(/^Invalid model reference "acme\/Demo-GGUF\/\.\.\/x\.gguf": refusing file name .*contains "\.\."/);
    for (const [argv, why] of [
      [['pull'], /^pull needs exactly one REFERENCE/],
      [['pull', 'a/b', '--mmproj', '--mmproj-file', 'x.gguf'], /^--mmproj and --mmproj-file exclude each other$/],
      [['rm'], /^rm needs exactly one REFERENCE/],
      [['ls', 'x'], /^ls takes no positional arguments$/],
      [['pull', 'a/b', '--bogus'], /Unknown option '--bogus'/],
    ] as const) {
      const e = await failure([...argv]);
      expect(e, argv.join(' ')).toBeInstanceOf(UsageError);
      expect(e.message, argv.join(' ')).toMatch(why);
    }
  });

  it('serve --model REFERENCE pulls the model first; a pulled reference then resolves without the network', async () => {
    const dir = tempDir('cli-serve-ref');
    const env: NodeJS.ProcessEnv = { ...process.env, NODE_NO_WARNINGS: '1', LLAMUX_MODELS_DIR: dir, LLAMUX_HF_ENDPOINT: hub.url };
    const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), 'serve', '--model', 'acme/Demo-GGUF', '--port', '0', '--threads', '1', '--parallel', '1'], { cwd: projectRoot, env });
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no URL in time; stderr: ${stderr}`)), 30_000);
      child.stdout.on('data', (d: Buffer) => {
        stdout += d.toString();
        const m = /listening on (http:\/\/\S+)[\s\S]*Anthropic:/.exec(stdout);
        if (!m) return;
        clearTimeout(timer);
        resolve(m[1]!);
      });
    });
    const path = join(dir, 'hf', 'acme', 'Demo-GGUF', 'Demo-Q4_K_M.gguf');
    try {
      expect(stderr).toContain('pulling acme/Demo-GGUF\nDemo-Q4_K_M.gguf: ');
      expect(stdout).toContain(`model ${path}`);
      expect(((await (await fetch(`${url}/health`)).json()) as { status: string }).status).toBe('ok');
    } finally {
      await new Promise((r) => {
        child.on('close', r);
        child.kill('SIGTERM');
      });
    }
    // What serve runs on its --model: the pulled file, found in the manifest, no request made.
    hub.requests.length = 0;
    const prev = process.env.LLAMUX_MODELS_DIR;
    process.env.LLAMUX_MODELS_DIR = dir;
    try {
      expect(await modelArgument('acme/Demo-GGUF', true)).toBe(path);
      expect(await modelArgument('acme/Demo-GGUF:q4_k_m', true)).toBe(path);
      expect(await modelArgument('./some/file.gguf', true)).toBe('./some/file.gguf'); // a path stays a path
    } finally {
      if (prev === undefined) delete process.env.LLAMUX_MODELS_DIR;
      else process.env.LLAMUX_MODELS_DIR = prev;
    }
    expect(hub.requests).toEqual([]);
  });
});

describe('PullProgressBar', () => {
  const progress = (done: number, more: Partial<Parameters<PullProgressBar['update']>[0]> = {}) => ({
    file: 'sub/Model-Q4_K_M.gguf',
    index: 0,
    count: 1,
    done,
    total: 1000,
    overallDone: done,
    overallTotal: 1000,
    cached: false,
    ...more,
  });

  it('redraws one line in place on a terminal, at most 10 times a second, and ends it', () => {
    let out = '';
    let now = 0;
    const bar = new PullProgressBar({ isTTY: true, columns: 120, write: (s: string) => (out += s) }, () => now);
    bar.update(progress(0));
    now = 50;
    bar.update(progress(100)); // too soon: not drawn
    now = 500;
    bar.update(progress(500));
    now = 1000;
    bar.update(progress(1000)); // the last one is always drawn
    bar.done();
    const frames = out.split('\r').slice(1);
    expect(frames).toHaveLength(3);
    expect(frames[0]).toBe('Model-Q4_K_M.gguf [------------------------------]   0%  0.0 KiB / 1.0 KiB\x1b[K');
    expect(frames[1]).toBe('Model-Q4_K_M.gguf [###############---------------]  50%  0.5 KiB / 1.0 KiB  1.0 KiB/s\x1b[K');
    expect(frames[2]).toBe('Model-Q4_K_M.gguf [##############################] 100%  1.0 KiB / 1.0 KiB  1.0 KiB/s\x1b[K\n');
    for (const f of frames) expect(f.replace('\x1b[K', '').replace('\n', '').length).toBeLessThan(120);
  });

  it('writes one plain line per file and no carriage return when the stream is not a terminal', () => {
    let out = '';
    const bar = new PullProgressBar({ write: (s: string) => (out += s) });
    bar.update(progress(0, { file: 'a-00001-of-00002.gguf', count: 2, total: 2 * 1024 * 1024 }));
    bar.update(progress(2 * 1024 * 1024, { file: 'a-00001-of-00002.gguf', count: 2, total: 2 * 1024 * 1024 }));
    bar.update(progress(10, { file: 'a-00002-of-00002.gguf', index: 1, count: 2, total: 10, cached: true }));
    bar.done();
    expect(out).toBe('a-00001-of-00002.gguf (1/2): 2.0 MiB\na-00002-of-00002.gguf (2/2): 0.0 KiB, already here\n');
  });
});
