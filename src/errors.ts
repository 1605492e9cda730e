import type { z } from 'zod';

/**
 * Every error code llamux throws or rejects with. The native list (native/engine/errors.h,
 * LLAMUX_ERROR_CODES) holds the same names in the same order; test/api/errors.test.ts checks it.
 */
export const ERROR_CODES = [
  'INVALID_ARGUMENT',
  'MODEL_NOT_FOUND',
  'MODEL_INVALID',
  'ABORTED',
  'DISPOSED',
  'CONTEXT_CREATE_FAILED',
  'CONTEXT_OVERFLOW',
  'KV_CACHE_FULL',
  'QUEUE_FULL',
  'DECODE_FAILED',
  'GRAMMAR_FAILED',
  'NATIVE_LOAD_FAILED',
  'STATE_RESTORE_FAILED',
  'SESSION_BUSY',
  'TRANSCRIPT_MISMATCH',
  'UNSUPPORTED',
  'RPC_UNAVAILABLE',
  'DOWNLOAD_FAILED',
  'DOWNLOAD_UNAUTHORIZED',
  'CHECKSUM_MISMATCH',
  'DISK_FULL',
  'MODEL_TOO_LARGE',
  'INTERNAL',
] as const;

export type LlamuxErrorCode = (typeof ERROR_CODES)[number];

const KNOWN_CODES: ReadonlySet<string> = new Set<string>(ERROR_CODES);

/** A code from the native addon (or anywhere untyped): itself when known, else 'INTERNAL'. */
export function toErrorCode(code: unknown): LlamuxErrorCode {
  return typeof code === 'string' && KNOWN_CODES.has(code) ? (code as LlamuxErrorCode) : 'INTERNAL';
}

export interface LlamuxErrorOptions {
  cause?: unknown;
  /** zod issues, for INVALID_ARGUMENT raised by option validation. */
  issues?: z.core.$ZodIssue[];
}

/**
 * The one error class of llamux. `code` is stable and meant for programs; `message` says
 * what the caller did wrong. Aborts have `name === 'AbortError'` like Node's own APIs.
 */
export class LlamuxError extends Error {
  readonly code: LlamuxErrorCode;
  readonly issues?: z.core.$ZodIssue[];

  constructor(code: LlamuxErrorCode, message: string, options: LlamuxErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    if (options.issues) this.issues = options.issues;
    if (code === 'ABORTED') this.name = 'AbortError';
  }
}
Object.defineProperty(LlamuxError.prototype, 'name', { value: 'LlamuxError', writable: true, configurable: true });

export function isLlamuxError(e: unknown, code?: LlamuxErrorCode): e is LlamuxError {
  return e instanceof LlamuxError && (code === undefined || e.code === code);
}

/** The error for an aborted signal: ABORTED, name AbortError, cause = signal.reason. */
export function abortError(signal?: AbortSignal, what = 'The operation'): LlamuxError {
  return new LlamuxError('ABORTED', `${what} was aborted`, { cause: signal?.reason });
}

/**
 * Converts an error thrown by the native addon ({ code, message }) into a LlamuxError,
 * keeping the caller's stack (captured before the native call) when given.
 */
export function fromNative(err: unknown, callerStack?: string): LlamuxError {
  if (err instanceof LlamuxError) return err;
  const e = err as { code?: unknown; message?: unknown } | undefined;
  const code = toErrorCode(e?.code);
  const message = typeof e?.message === 'string' ? e.message : String(err);
  const out = new LlamuxError(code, message, { cause: err });
  if (callerStack) out.stack = `${out.name}: ${message}\n${callerStack.split('\n').slice(1).join('\n')}`;
  return out;
}
