import { native } from './native/binding.js';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
export type LogHandler = (level: Exclude<LogLevel, 'silent'>, message: string) => void;

// ggml_log_level values
const LEVELS: Record<LogLevel, number> = { debug: 1, info: 2, warn: 3, error: 4, silent: 99 };
const NAMES: Record<number, Exclude<LogLevel, 'silent'>> = { 1: 'debug', 2: 'info', 3: 'warn', 4: 'error' };

let current: { level: LogLevel; handler: LogHandler } | undefined;

function defaultHandler(level: Exclude<LogLevel, 'silent'>, message: string): void {
  process.emitWarning(message.trimEnd(), { code: `LLAMUX_LLAMA_${level.toUpperCase()}` });
}

/**
 * Routes llama.cpp's log to `handler` for lines at `level` or above. Lines arrive in
 * batches on the event loop, never from the native threads directly. The default is
 * `'warn'` through `process.emitWarning`; `'silent'` drops everything.
 */
export function setLogger(level: LogLevel, handler: LogHandler = defaultHandler): void {
  if (!(level in LEVELS)) throw new TypeError(`Expected log level to be one of ${Object.keys(LEVELS).join(', ')}`);
  current = { level, handler };
  if (level === 'silent') {
    native.setLogger(undefined, LEVELS.silent);
    return;
  }
  native.setLogger((batch: Array<number | string>) => {
    const h = current?.handler;
    if (!h) return;
    for (let i = 0; i + 1 < batch.length; i += 2) {
      const name = NAMES[batch[i] as number] ?? 'info';
      try {
        h(name, batch[i + 1] as string);
      } catch {
        // a logger that throws must not take down the engine's event delivery
      }
    }
  }, LEVELS[level]);
}

export function ensureDefaultLogger(): void {
  if (!current) setLogger('warn');
}

/** A line from llamux itself (not llama.cpp) through the same logger and level. */
export function libraryLog(level: Exclude<LogLevel, 'silent'>, message: string): void {
  ensureDefaultLogger();
  const c = current!;
  if (LEVELS[level] < LEVELS[c.level]) return;
  try {
    c.handler(level, message);
  } catch {
    // a throwing logger must not break the caller
  }
}
