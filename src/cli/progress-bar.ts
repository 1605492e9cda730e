// One progress line on stderr for the CLI (model loading, prompt prefill): a bar redrawn in
// place on a terminal; on a pipe or file, a plain line at every quarter so logs stay short.

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
