// Repeated measurements: every benchmark figure is the median of several runs, printed with
// its spread (min–max), so a noisy machine or a bad run shows instead of hiding.

export interface Spread {
  median: number;
  min: number;
  max: number;
  runs: number[];
}

export function spread(values: number[]): Spread {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
  return { median, min: s[0]!, max: s[s.length - 1]!, runs: values };
}

/** Runs `fn` `n` times (in order) and collects the spread of each numeric field. */
export async function repeat<T extends { [K in keyof T]: number }>(n: number, fn: (run: number) => Promise<T> | T): Promise<{ [K in keyof T]: Spread }> {
  const all: T[] = [];
  for (let i = 0; i < n; i++) all.push(await fn(i));
  const out = {} as { [K in keyof T]: Spread };
  for (const k of Object.keys(all[0]!) as Array<keyof T>) out[k] = spread(all.map((r) => r[k]));
  return out;
}

/** "120.7 (118.2–122.0)"; a single run prints just the value. */
export function fmtSpread(s: Spread, digits = 1): string {
  const f = (n: number): string => (Math.abs(n) >= 1000 ? Math.round(n).toLocaleString('en-US') : n.toFixed(digits));
  return s.runs.length > 1 ? `${f(s.median)} (${f(s.min)}–${f(s.max)})` : f(s.median);
}

/** Median of the run-by-run ratios a/b, "0.98x": systems that took turns run by run, so a slow spell of a noisy host weighs on both sides of each ratio. */
export function pairedRatio(a: Spread, b: Spread): string {
  return `${spread(a.runs.map((v, i) => v / b.runs[i]!)).median.toFixed(2)}x`;
}

/** Ratio of two medians, "0.98x". */
export function ratio(a: Spread, b: Spread): string {
  return `${(a.median / b.median).toFixed(2)}x`;
}
