// `llamux run`: generation from the command line on the scripted long-script model, whose greedy
// continuation is known; the prefill progress bar; context shift from the command line.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ProgressLine, formatBar } from '../../src/cli/progress-bar.js';
import { piecesText, script, testModel } from '../helpers/models.js';
import { projectRoot } from '../helpers/paths.js';

function cli(args: string[], input?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), ...args], {
      cwd: projectRoot,
      env: { ...process.env, NODE_NO_WARNINGS: '1' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(input ?? '');
  });
}

describe('llamux run (scripted long-script model)', () => {
  const model = () => testModel('long-script').path;
  const main = () => script('long-script');
  const prompt = 'Tell me a long story:';

  it('streams the greedy continuation to stdout (prompt from --prompt or stdin)', async () => {
    const want = piecesText(main().greedyPieces.slice(0, 20));
    const a = await cli(['run', '--model', model(), '--prompt', prompt, '--temp', '0', '-n', '20', '--threads', '1', '-q']);
    expect(a.code).toBe(0);
    expect(a.stdout).toBe(`${want}\n`);
    expect(a.stderr).toBe('');
    const b = await cli(['run', '-m', model(), '--temp', '0', '-n', '20', '--threads', '1'], prompt);
    expect(b.stdout).toBe(`${want}\n`);
    expect(b.stderr).toMatch(/\d+ prompt tokens \(0 cached\), 20 generated; .* \(length\)/);
  });

  it('draws the prefill progress bar for a long prompt, ending at every token of it', async () => {
    const long = `${'Tell me a long story: '.repeat(80)}${prompt}`;
    const r = await cli(['run', '-m', model(), '-p', long, '--temp', '0', '-n', '1', '--threads', '1', '--progress', '--ctx', '1024']);
    expect(r.code).toBe(0);
    const total = Number(/(\d+) prompt tokens/.exec(r.stderr)![1]);
    expect(total).toBeGreaterThan(256);
    expect(r.stderr).toContain(`\rprompt [${'#'.repeat(24)}] 100% ${total}/${total} tokens\n`);
  });

  it('--context-shift goes on past the context (--ctx 256); without it the answer ends at the context', async () => {
    const n = 290;
    const want = piecesText(main().greedyPieces.slice(0, n));
    const shifted = await cli(['run', '-m', model(), '-p', prompt, '--temp', '0', '-n', String(n), '--ctx', '256', '--threads', '1', '--context-shift']);
    expect(shifted.code).toBe(0);
    expect(shifted.stdout).toBe(`${want}\n`);
    expect(shifted.stderr).toMatch(new RegExp(`${n} generated, \\d+ dropped by context shifts`));
    const plain = await cli(['run', '-m', model(), '-p', prompt, '--temp', '0', '-n', String(n), '--ctx', '256', '--threads', '1']);
    expect(plain.stdout.length).toBeLessThan(want.length);
    expect(plain.stderr).toMatch(/\(length\)/);
  });

  it('refuses bad arguments with a usage error (exit 2)', async () => {
    const r = await cli(['run', '--prompt', 'x']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('run needs --model PATH');
    const k = await cli(['run', '-m', model(), '-p', 'x', '--n-keep', '-5']);
    expect(k.code).toBe(2);
    expect(k.stderr).toContain('--n-keep');
  });
});

describe('ProgressLine', () => {
  it('formats a bar', () => {
    expect(formatBar(0, 4)).toBe('[----]');
    expect(formatBar(0.5, 4)).toBe('[##--]');
    expect(formatBar(2, 4)).toBe('[####]');
  });

  it('redraws in place on a terminal and prints quarters elsewhere', () => {
    const out: string[] = [];
    const sink = new PassThrough();
    sink.on('data', (d: Buffer) => out.push(d.toString()));
    const tty = new ProgressLine('load', { stream: sink, inPlace: true });
    tty.update(1, 4, 'parts');
    tty.update(4, 4, 'parts');
    tty.done();
    const plain = new ProgressLine('load', { stream: sink, inPlace: false });
    for (let i = 0; i <= 100; i++) plain.update(i / 100);
    expect(out.join('')).toBe(
      `\rload ${formatBar(0.25)}  25% 1/4 parts\rload ${formatBar(1)} 100% 4/4 parts\n` + 'load 0%\nload 25%\nload 50%\nload 75%\nload 100%\n',
    );
  });
});
