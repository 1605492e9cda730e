// The argument helpers of the `llamux` CLI (src/cli.ts): parsing, typed usage errors, the
// option values that need more than parseArgs checks.
import { ProgressLine } from './progress-bar.js';
import { MARKER_PRESETS, type MarkerOption, type MarkerPresetName } from '../engine/markers.js';
import { rpcEndpoint } from '../options.js';
import type { FitDevice } from '../model/fit.js';

export class UsageError extends Error {}

export function intArg(value: string | undefined, name: string, min: number): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < min) throw new UsageError(`--${name} expects an integer ≥ ${min}, got "${value}"`);
  return Number(value);
}

/** doctor --gpu-memory MIB[,MIB...]: one assumed GPU per figure, with that much free memory. */
export function parseGpuMemory(value: string): FitDevice[] {
  const parts = value.split(',').map((p) => p.trim());
  if (parts.length === 0 || parts.length > 16 || parts.some((p) => !/^\d+$/.test(p) || Number(p) < 1)) {
    throw new UsageError(`--gpu-memory expects MiB of free memory per GPU (integers ≥ 1, comma-separated, at most 16), got "${value}"`);
  }
  return parts.map((p, i) => ({ name: `GPU${i}`, description: 'assumed (--gpu-memory)', type: 'gpu', memoryFree: Number(p) * 1024 * 1024, memoryTotal: Number(p) * 1024 * 1024 }));
}

/**
 * serve --prompt-cache-ttl SHORT[,LONG]: seconds a `cache_control` breakpoint with ttl "5m"
 * (and "1h") keeps its prefix in the cache tiers (Anthropic's 300 and 3600 by default).
 */
export function parsePromptCacheTtl(value: string): { '5m': number; '1h'?: number } {
  const parts = value.split(',').map((p) => p.trim());
  const max = Math.floor((2 ** 31 - 1) / 1000);
  if (parts.length > 2 || parts.some((p) => !/^\d+$/.test(p) || Number(p) < 1 || Number(p) > max)) {
    throw new UsageError(`--prompt-cache-ttl expects SECONDS or SECONDS,SECONDS (for ttl "5m", then "1h"; each 1 to ${max}), got "${value}"`);
  }
  return { '5m': Number(parts[0]) * 1000, ...(parts[1] !== undefined ? { '1h': Number(parts[1]) * 1000 } : {}) };
}

/** --markers: auto | none | false | a preset | START,END */
export function parseMarkersArg(value: string | undefined): MarkerOption {
  if (value === undefined || value === 'auto') return 'auto';
  if (value === 'none' || value === 'false' || value === 'off') return false;
  if (Object.hasOwn(MARKER_PRESETS, value)) return value as MarkerPresetName;
  const comma = value.indexOf(',');
  if (comma > 0 && comma < value.length - 1) return { start: value.slice(0, comma), end: value.slice(comma + 1) };
  throw new UsageError(`--markers expects auto, none, one of ${Object.keys(MARKER_PRESETS).join(', ')}, or START,END; got "${value}"`);
}

export function progressPrinter(label: string, quiet: boolean): { onProgress: (p: number) => void; done: () => void } {
  const line = new ProgressLine(label, { quiet });
  return { onProgress: (p: number) => line.update(p), done: () => line.done() };
}

/** `--spec ngram|draft|mtp|off`, `--draft-model` and `--spec-draft-max`. */
export function specArgs(
  mode: string | undefined,
  draftMax: string | undefined,
  draftModel: string | undefined,
): { speculative?: 'draft' | { mode: 'ngram' | 'mtp'; draftMax?: number }; draftModelPath?: string } {
  if ((mode === 'draft') !== (draftModel !== undefined)) throw new UsageError('--spec draft and --draft-model PATH go together');
  if (mode === undefined || mode === 'off') {
    if (draftMax !== undefined) throw new UsageError('--spec-draft-max needs --spec ngram');
    return {};
  }
  if (mode === 'draft') {
    if (draftMax !== undefined) throw new UsageError('--spec-draft-max applies to --spec ngram');
    return { speculative: 'draft', draftModelPath: draftModel! };
  }
  if (mode !== 'ngram' && mode !== 'mtp') throw new UsageError(`--spec must be ngram, draft, mtp or off, not ${JSON.stringify(mode)}`);
  const n = intArg(draftMax, 'spec-draft-max', 1);
  return { speculative: { mode, ...(n !== undefined ? { draftMax: n } : {}) } };
}

/**
 * llama-server's `--lora-scaled PATH SCALE` takes two values, which parseArgs cannot: taken out
 * of the arguments first, in order.
 */
export function takeLoraScaled(args: readonly string[]): { rest: string[]; scaled: Array<{ path: string; scale: number }> } {
  const rest: string[] = [];
  const scaled: Array<{ path: string; scale: number }> = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] !== '--lora-scaled') {
      rest.push(args[i]!);
      continue;
    }
    const path = args[i + 1];
    const scale = Number(args[i + 2]);
    if (path === undefined || path.startsWith('--') || args[i + 2] === undefined || args[i + 2]!.trim() === '' || !Number.isFinite(scale)) {
      throw new UsageError('--lora-scaled expects PATH SCALE (a file and a number)');
    }
    scaled.push({ path, scale });
    i += 2;
  }
  return { rest, scaled };
}

/** --rpc host:port,host:port */
export function parseRpcList(value: string): string[] {
  const list = value.split(',').map((s) => s.trim()).filter(Boolean);
  if (list.length === 0) throw new UsageError('--rpc expects HOST:PORT[,HOST:PORT...]');
  for (const ep of list) {
    if (!rpcEndpoint.safeParse(ep).success) throw new UsageError(`--rpc expects HOST:PORT[,HOST:PORT...]; "${ep}" is not HOST:PORT`);
  }
  return list;
}
