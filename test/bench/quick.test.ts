// `bench/index.ts --quick` runs every suite end to end on the small models. Nothing here is about
// speed: only that each suite finishes and prints its table.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../helpers/paths.js';

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

function bench(args: string[], timeoutMs: number): Promise<Run> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'bench', 'index.ts'), ...args], {
      cwd: projectRoot,
      env: { ...process.env, NODE_NO_WARNINGS: '1' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

const SUITES = ['engine', 'markers', 'cache', 'tools', 'replay', 'throughput', 'overhead', 'rpc', 'bounded'];

/** Column headers of the tables of the head-to-head suites. */
const TABLE_HEADERS: Record<string, RegExp[]> = {
  replay: [
    /### replay: time to first token per turn/,
    /\| turn +\| prompt tokens \| new tokens \| session ms \| server ms \| no cache ms \| node-llama-cpp ms \|/,
    /### replay: prompt tokens prefilled per turn/,
    /\| system +\| turn \d+ TTFT ms \| vs node-llama-cpp \| prefilled \| prefilled \/ new tokens \|/,
    // issue 26: every turn of the deterministic session matches the deterministic cold run
    /\| server calls replayed \| session identical to no cache \| deterministic: identical \|/,
  ],
  cache: [/\| identical to cold \(8 tokens \+ logprobs\) \| deterministic: identical to cold \|/],
  throughput: [/### throughput: concurrent conversations/, /\| conversations \| llamux decode tok\/s \| llamux per-sequence KV tok\/s \| node-llama-cpp decode tok\/s \|/],
  overhead: [/### overhead: one sequence/, /\| system +\| prefill tok\/s \| prefill vs raw \| decode tok\/s \| decode vs raw \|/],
  bounded: [/### bounded: decode beside 4 clients sending hostile tool schemas/, /hostile requests sent: \d+ \(\d+ x 400\); every one must be a 400/],
  rpc: [/### rpc: local vs split across two loopback rpc-servers/, /\| 2 rpc-servers, loopback \| [\d.,]+ +\| [\d.,]+ +\| [\d.]+x +\| [\d.]+x +\|/],
};

describe('bench --quick', () => {
  it('runs every suite end to end and prints each table', { timeout: 300_000 }, async () => {
    const r = await bench(['--quick'], 290_000);
    const tail = `${r.stdout.slice(-3000)}\n--- stderr ---\n${r.stderr.slice(-3000)}`;
    expect(r.signal, tail).toBeNull();
    expect(r.code, tail).toBe(0);
    for (const s of SUITES) expect(r.stdout, `suite ${s}`).toContain(`## ${s}\n`);
    for (const [s, headers] of Object.entries(TABLE_HEADERS)) {
      for (const h of headers) expect(r.stdout, `suite ${s}: ${h}`).toMatch(h);
    }
    // the last turn of the replay table has a figure for every system
    expect(r.stdout).toMatch(/\| 3 +\| \d+ +\| \d+ +\| [\d.,]+ +\| [\d.,]+ +\| [\d.,]+ +\| [\d.,]+ +\|/);
    // the server replays turn 0's call by its id, so turn 1 prefills only the new tokens (the
    // harness forces the scripted turn on the server's session path too)
    const turn1 = /\| 1 +\| (\d+) +\| \d+ +\| (\d+) +\| \d+ +\| \d+ +\| (\d+) +\|/.exec(r.stdout);
    expect(turn1, 'replay: prefilled row of turn 1').not.toBeNull();
    expect(Number(turn1![3]), 'server calls replayed at turn 1').toBe(1);
    expect(Number(turn1![2]), 'server prefilled at turn 1').toBe(Number(turn1![1]));
    // replay, deterministic mode: the session's log-probabilities equal the cold run's on every turn
    const identity = [...r.stdout.matchAll(/\| +\d+ +\| (yes|no) +\| (yes|no) +\|\n/g)].map((m) => m[2]);
    expect(identity.length, 'replay: turns with an identity column').toBeGreaterThanOrEqual(4);
    expect(identity.every((v) => v === 'yes'), `deterministic identity per turn: ${identity.join(', ')}`).toBe(true);
    expect(r.stdout).toMatch(/bench finished in [\d.]+ s \(quick mode\)/);
  });

  it('rejects an unknown suite', { timeout: 60_000 }, async () => {
    const r = await bench(['--suite', 'nope'], 55_000);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown suite "nope"/);
  });
});
