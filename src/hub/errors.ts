// The typed error of pull(): a LlamuxError that also says which URL answered what, and for an
// unknown quant tag which tags the repository has, so a program can offer them.
import { LlamuxError, type LlamuxErrorCode } from '../errors.js';

export interface HubErrorDetails {
  cause?: unknown;
  /** The URL that failed, when a request did. */
  url?: string;
  /** The HTTP status, when the server answered. */
  status?: number;
  /** For an unknown quant tag or file: what the repository has. */
  available?: string[];
}

export class HubError extends LlamuxError {
  readonly url?: string;
  readonly status?: number;
  readonly available?: string[];

  constructor(code: LlamuxErrorCode, message: string, details: HubErrorDetails = {}) {
    super(code, message, details.cause === undefined ? {} : { cause: details.cause });
    if (details.url !== undefined) this.url = details.url;
    if (details.status !== undefined) this.status = details.status;
    if (details.available !== undefined) this.available = details.available;
  }
}
Object.defineProperty(HubError.prototype, 'name', { value: 'HubError', writable: true, configurable: true });
