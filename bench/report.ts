// Table printing and result files for benchmarks.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../src/native/binding.js';
import { describeSystem, systemInfo } from '../src/native/system-info.js';

export type Row = Record<string, string | number>;

export function fmt(n: number, digits = 1): string {
  if (!Number.isFinite(n)) return '-';
  if (Math.abs(n) >= 1000) return Math.round(n).toLocaleString('en-US');
  return n.toFixed(digits);
}

export function table(title: string, rows: Row[]): string {
  if (rows.length === 0) return `${title}\n(no rows)\n`;
  const cols = Object.keys(rows[0]!);
  const cells = rows.map((r) => cols.map((c) => String(r[c] ?? '')));
  const widths = cols.map((c, i) => Math.max(c.length, ...cells.map((r) => r[i]!.length)));
  const line = (vals: string[]) => `| ${vals.map((v, i) => v.padEnd(widths[i]!)).join(' | ')} |`;
  // Every table says where it was measured: ratios only compare within one machine.
  return [`### ${title}`, '', line(cols), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...cells.map(line), '', `_on ${describeSystem()}_`, ''].join('\n');
}

export function machine(): Record<string, unknown> {
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    system: systemInfo(),
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    platform: `${process.platform}-${process.arch}`,
    node: process.version,
  };
}

export function writeResult(suite: string, data: Record<string, unknown>): string {
  const dir = join(packageRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const date = new Date().toISOString();
  const file = join(dir, `${suite}-${date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify({ suite, date, machine: machine(), versions: { llamux: '0.1.0', 'node-llama-cpp': '3.21.1' }, ...data }, null, 2));
  return file;
}

export function progress(msg: string): void {
  process.stderr.write(`\r\x1b[2K[bench] ${msg}`);
}
export function progressDone(): void {
  process.stderr.write('\r\x1b[2K');
}
