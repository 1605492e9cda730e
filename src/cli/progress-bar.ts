// The CLI's progress display on stderr (stdout keeps only the command's output): bars redrawn
// in place on a terminal; on a pipe or a file, plain lines (no carriage returns in logs).
//   ProgressLine: one counted task (model loading, prompt prefill), a line per quarter off a terminal.
//   PullProgressBar: `llamux pull`'s files, with sizes and the transfer rate.
import type { PullProgress } from '../hub/pull.js';

/** `[#########---------]` for a fraction in [0, 1] (clamped). */
export function formatBar(fraction: number, width = 24): string {
  const f = Number.isFinite(fraction) ? Math.min(1, Math.max(0, fraction)) : 0;
  const filled = Math.round(f * width);
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}]`;
}

export interface ProgressLineOptions {
  /** Where the line goes (default process.stderr). */
  stream?: NodeJS.WritableStream & { isTTY?: boolean };
  /** Print nothing. */
  quiet?: boolean;
  /** Redraw in place even when the stream is not a terminal (tests, `--progress`). */
  inPlace?: boolean;
}

export class ProgressLine {
  readonly #label: string;
  readonly #stream: NodeJS.WritableStream;
  readonly #quiet: boolean;
  readonly #inPlace: boolean;
  #lastPct = -1;
  #drawn = false;

  constructor(label: string, options: ProgressLineOptions = {}) {
    this.#label = label;
    this.#stream = options.stream ?? process.stderr;
    this.#quiet = options.quiet ?? false;
    this.#inPlace = options.inPlace ?? (options.stream ?? process.stderr).isTTY === true;
  }

  /** `done` of `total` units; `unit` names them in the line ("tokens"); without a total, a fraction in [0, 1]. */
  update(done: number, total?: number, unit?: string): void {
    if (this.#quiet) return;
    const fraction = total === undefined ? done : total > 0 ? done / total : 1;
    const pct = Math.floor(Math.min(1, Math.max(0, fraction)) * 100);
    const counts = total !== undefined ? ` ${done}/${total}${unit ? ` ${unit}` : ''}` : '';
    if (this.#inPlace) {
      if (pct === this.#lastPct && total === undefined) return;
      this.#stream.write(`\r${this.#label} ${formatBar(fraction)} ${String(pct).padStart(3)}%${counts}`);
      this.#drawn = true;
    } else if (this.#lastPct < 0 || Math.floor(pct / 25) > Math.floor(this.#lastPct / 25)) {
      this.#stream.write(`${this.#label} ${pct}%${counts}\n`);
    } else {
      return;
    }
    this.#lastPct = pct;
  }

  /** Ends the line (a newline after an in-place bar). */
  done(): void {
    if (!this.#quiet && this.#drawn) this.#stream.write('\n');
    this.#drawn = false;
  }
}

export interface ProgressStream {
  write(s: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

const MIB = 1024 * 1024;
export const sizeText = (n: number): string => (n >= 1024 * MIB ? `${(n / 1024 / MIB).toFixed(2)} GiB` : n >= MIB ? `${(n / MIB).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`);

export class PullProgressBar {
  readonly #out: ProgressStream;
  readonly #tty: boolean;
  readonly #now: () => number;
  #file = -1;
  #drawnAt = 0;
  #drawn = false;
  #started = 0;
  #startBytes = 0;

  constructor(out: ProgressStream, now: () => number = Date.now) {
    this.#out = out;
    this.#tty = out.isTTY === true;
    this.#now = now;
  }

  /** For PullOptions.onProgress. */
  update = (p: PullProgress): void => {
    const fresh = p.index !== this.#file;
    if (fresh) {
      this.#endLine();
      this.#file = p.index;
      this.#started = this.#now();
      this.#startBytes = p.done;
      if (!this.#tty) this.#out.write(`${p.file}${p.count > 1 ? ` (${p.index + 1}/${p.count})` : ''}: ${p.total !== undefined ? sizeText(p.total) : 'size unknown'}${p.cached ? ', already here' : ''}\n`);
    }
    if (!this.#tty) return;
    const t = this.#now();
    const last = p.total !== undefined && p.done >= p.total;
    if (!fresh && !last && t - this.#drawnAt < 100) return; // 10 redraws a second at most
    this.#drawnAt = t;
    this.#draw(p, t);
  };

  /** Ends the bar's line (call when the pull settles). */
  done(): void {
    this.#endLine();
  }

  #endLine(): void {
    if (this.#drawn) this.#out.write('\n');
    this.#drawn = false;
  }

  #draw(p: PullProgress, t: number): void {
    const name = `${p.count > 1 ? `[${p.index + 1}/${p.count}] ` : ''}${p.file.split('/').pop()}`;
    const secs = (t - this.#started) / 1000;
    const rate = secs > 0.2 && !p.cached ? `  ${sizeText((p.done - this.#startBytes) / secs)}/s` : '';
    const amount = p.total !== undefined ? `${sizeText(p.done)} / ${sizeText(p.total)}` : sizeText(p.done);
    const pct = p.total ? Math.min(1, p.done / p.total) : undefined;
    const tail = `${pct !== undefined ? `${String(Math.floor(pct * 100)).padStart(3)}%  ` : ''}${amount}${rate}${p.cached ? '  (already here)' : ''}`;
    const cols = Math.max(40, this.#out.columns ?? 80);
    // The bar's width depends on the terminal and the name only, so it does not jump between frames.
    const barWidth = Math.max(10, Math.min(30, cols - Math.min(name.length, 30) - 50));
    const bar = pct !== undefined ? formatBar(pct, barWidth) : '';
    const line = `${name.length > 30 ? `${name.slice(0, 29)}…` : name} ${bar} ${tail}`;
    this.#out.write(`\r${line.slice(0, cols - 1)}\x1b[K`);
    this.#drawn = true;
  }
}
