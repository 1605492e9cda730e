// Issue 37's multimodal suite end to end in quick mode (17 s here when quiet, 8.5 min at load average 15, so
// this file is on the slow list): 8 turns, a forced tool call each turn, and llamux encodes one
// image and prefills only what no cache can hold on every turn (token counts: exact whatever the
// load). The must-prefill column is rendered on the client with the library's chat template.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../helpers/paths.js';

function bench(args: string[], timeoutMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
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

/** The header and rows of the markdown table after the line that contains `title`. */
function tableAfter(text: string, title: string): { header: string[]; rows: string[][] } {
  const lines = text.split('\n');
  const start = lines.findIndex((l) => l.includes(title));
  const cells = (l: string) => l.split('|').slice(1, -1).map((c) => c.trim());
  if (start < 0) return { header: [], rows: [] };
  const rows: string[][] = [];
  for (let i = start + 4; i < lines.length && lines[i]!.startsWith('|'); i++) rows.push(cells(lines[i]!));
  return { header: cells(lines[start + 2] ?? '|'), rows };
}

const num = (s: string) => Number(s.replace(/,/g, ''));

describe('multimodal suite, quick mode', () => {
  it('8 screenshot turns: llamux encodes one image and prefills only what no cache holds each turn', { timeout: 900_000 }, async () => {
    const r = await bench(['--suite', 'multimodal', '--quick'], 890_000);
    const tail = `${r.stdout.slice(-4000)}\n--- stderr ---\n${r.stderr.slice(-2000)}`;
    expect(r.code, tail).toBe(0);
    const summary = tableAfter(r.stdout, '### multimodal: screenshot agent, turn 8');
    expect(summary.header, tail).toEqual([
      'llamux turn 8 TTFT ms',
      'llama-server turn 8 TTFT ms',
      'llamux / llama-server',
      'target ≤ 0.5x',
      'llamux encoded 1 image and prefilled only what no cache holds',
      'prefilled turns 2-8 (llamux / llama-server)',
    ]);
    expect(summary.rows[0]![4]).toBe('yes');
    const turns = tableAfter(r.stdout, '### multimodal: per turn');
    expect(turns.header.slice(0, 5)).toEqual(['turn', 'prompt tokens', 'new tokens', 'must prefill', 'llamux prefilled']);
    expect(turns.rows.map((t) => t[0])).toEqual(['1', '2', '3', '4', '5', '6', '7', '8']);
    // turn 1 prefills its whole prompt; later turns reuse the KV of every earlier screenshot
    expect(num(turns.rows[0]![4]!)).toBe(num(turns.rows[0]![1]!));
    for (const t of turns.rows.slice(1)) {
      expect(num(t[4]!), `turn ${t[0]}`).toBeLessThanOrEqual(num(t[3]!));
      expect(num(t[4]!), `turn ${t[0]}`).toBeLessThan(num(t[1]!) / 3);
      expect(t[6]!.split(' / ')[0], `turn ${t[0]}: images llamux encoded`).toBe('1');
    }
    expect(r.stdout).toMatch(/tool calls written by llamux: 8 of 8 turns/);
  });
});
