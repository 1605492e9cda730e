import { LlamuxError } from '../errors.js';

/**
 * Thrown when bytes are not a GGUF file this package can read, or describe one llama.cpp would
 * refuse (truncated, garbage, bad alignment, impossible sizes). A LlamuxError with the code
 * `MODEL_INVALID`, plus the byte offset of the problem.
 */
export class GgufFormatError extends LlamuxError {
  /** Always `'MODEL_INVALID'`. */
  declare readonly code: 'MODEL_INVALID';
  /** Byte offset in the file where the problem was found, when known. */
  readonly offset: number | undefined;

  constructor(message: string, options?: { offset?: number; cause?: unknown }) {
    super('MODEL_INVALID', message, options?.cause === undefined ? {} : { cause: options.cause });
    this.offset = options?.offset;
  }
}
Object.defineProperty(GgufFormatError.prototype, 'name', {
  value: 'GgufFormatError',
  enumerable: false,
  configurable: true,
  writable: true,
});
