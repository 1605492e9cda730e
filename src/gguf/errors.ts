/**
 * Thrown when bytes are not a GGUF file this package can read, or describe one llama.cpp would
 * refuse (truncated, garbage, bad alignment, impossible sizes).
 *
 * Local stand-in until the project's `LlamuxError` lands; `code` already uses the shared code.
 */
export class GgufFormatError extends Error {
  /** Always `'MODEL_INVALID'`. */
  readonly code = 'MODEL_INVALID' as const;
  /** Byte offset in the file where the problem was found, when known. */
  readonly offset: number | undefined;

  constructor(message: string, options?: { offset?: number; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.offset = options?.offset;
  }
}
Object.defineProperty(GgufFormatError.prototype, 'name', {
  value: 'GgufFormatError',
  enumerable: false,
  configurable: true,
  writable: true,
});
