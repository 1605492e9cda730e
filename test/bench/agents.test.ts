// Issue 41's suites end to end in their quick modes (12-60 s each here, so this file is on
// the slow list): `agent-traffic` prints a table per client shape and llamux reuses each
// conversation's KV from turn 1 on; `correctness` passes every llamux check and exits 0, and
// exits 1 against a server that hands conversations each other's replies.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { markerWordsIn } from '../../bench/echo-model.js';
import { projectRoot } from '../helpers/paths.js';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function bench(args: string[], timeoutMs: number): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'bench', 'index.ts'), ...args], { cwd: projectRoot, env: { ...process.env, NODE_NO_WARNINGS: '1' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** The rows of the markdown table after the line that contains `title`. */
function rowsAfter(text: string, title: string): string[][] {
  const lines = text.split('\n');
  const start = lines.findIndex((l) => l.includes(title));
  if (start < 0) return [];
  const out: string[][] = [];
  for (let i = start + 4; i < lines.length && lines[i]!.startsWith('|'); i++) out.push(lines[i]!.split('|').slice(1, -1).map((c) => c.trim()));
  return out;
}

const num = (s: string) => Number(s.replace(/,/g, ''));

describe('issue 41 suites, quick mode', () => {
  it('agent-traffic: every shape measured or n/a, and llamux prefills a fraction of each later turn', { timeout: 240_000 }, async () => {
    const r = await bench(['--suite', 'agent-traffic', '--quick'], 230_000);
    const tail = `${r.stdout.slice(-3000)}\n--- stderr ---\n${r.stderr.slice(-2000)}`;
    expect(r.code, tail).toBe(0);
    const summary = rowsAfter(r.stdout, '### agent-traffic: turn 3 per client shape');
    expect(summary.map((c) => c[0]), tail).toEqual(['claude-code', 'codex', 'codex-full', 'opencode']);
    // the Responses shapes: measured where the server has /v1/responses, else n/a
    for (const row of summary.slice(1, 3)) expect(row[1]).toMatch(/^n\/a$|^[\d.,]+$/);
    for (const title of ['Claude Code-like', 'opencode-like']) {
      const turns = rowsAfter(r.stdout, `### agent-traffic: ${title}`);
      expect(turns.length, title).toBe(4);
      // turn 0 prefills the whole prompt (system prompt with the tool schemas); from turn 1 on
      // the conversation's KV is reused: what is prefilled is a small part of the prompt
      expect(num(turns[0]![3]!), title).toBe(num(turns[0]![1]!));
      for (const t of turns.slice(1)) expect(num(t[3]!), `${title} turn ${t[0]}`).toBeLessThan(num(t[1]!) / 10);
    }
  });

  it('correctness: every llamux check passes (exit 0)', { timeout: 240_000 }, async () => {
    const r = await bench(['--suite', 'correctness', '--quick'], 230_000);
    const tail = `${r.stdout.slice(-4000)}\n--- stderr ---\n${r.stderr.slice(-2000)}`;
    expect(r.code, tail).toBe(0);
    const rows = rowsAfter(r.stdout, '### correctness: llamux vs llama-server');
    expect(rows.length, tail).toBe(8);
    for (const row of rows) expect(row[1], row[0]).toMatch(/^pass \(/);
    expect(r.stdout).toContain('llamux: every check passed');
  });

  it('correctness --url: exits 1 when replies carry another conversation\'s marker', { timeout: 120_000 }, async () => {
    let previous = 'amber';
    const server = createServer((req, res) => {
      let raw = '';
      req.on('data', (d: Buffer) => (raw += d.toString()));
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        if (req.url === '/v1/models') return res.end(JSON.stringify({ object: 'list', data: [{ id: 'mixup' }] }));
        const body = JSON.parse(raw) as { messages: Array<{ role: string; content: string }> };
        const content = previous;
        previous = markerWordsIn(body.messages.find((m) => m.role === 'user')!.content).join(' ');
        res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }], usage: { prompt_tokens: 9, completion_tokens: 2 } }));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    try {
      const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const r = await bench(['--suite', 'correctness', '--quick', '--', '--url', url], 110_000);
      expect(r.code, r.stdout.slice(-2000)).toBe(1);
      expect(r.stdout).toMatch(/\| no reply shows another conversation's marker \| FAIL/);
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});
