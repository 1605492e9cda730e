// HTTP plumbing shared by the endpoints: bounded JSON bodies, errors in each SDK's shape, SSE.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';
import { isLlamuxError } from '../errors.js';
import { formatIssues } from '../issues.js';
import { MAX_JSON_DEPTH, jsonTextDepth } from '../json-limits.js';

export type ApiFlavor = 'openai' | 'anthropic';

export type HttpErrorKind =
  | 'invalid_request'
  | 'authentication'
  | 'forbidden'
  | 'not_found'
  | 'too_large'
  | 'unsupported_media_type'
  | 'rate_limited'
  | 'overloaded'
  | 'server'
  | 'context_length';

/** An error that becomes an HTTP response in the caller's API shape. */
export class HttpError extends Error {
  readonly status: number;
  readonly kind: HttpErrorKind;
  readonly param?: string;
  /** Seconds a client should wait before retrying (sent as `Retry-After` on 429 and 503/529). */
  retryAfter?: number;
  /** The OpenAI error `code` when the kind's default does not say enough (e.g. `model_not_found`). */
  apiCode?: string;
  constructor(status: number, kind: HttpErrorKind, message: string, param?: string) {
    super(message);
    this.status = status;
    this.kind = kind;
    if (param !== undefined) this.param = param;
    if (status === 429 || status === 503) this.retryAfter = 1;
  }
}
Object.defineProperty(HttpError.prototype, 'name', { value: 'HttpError', writable: true, configurable: true });

/** Maps any thrown value to an HttpError. */
/** The abort reason of the requests a closing server ends (SIGTERM, server.close()). */
export class ServerClosingError extends Error {
  constructor() {
    super('The server is shutting down');
    this.name = 'ServerClosingError';
  }
}

/** What a request ended by the server's shutdown answers: 503, or an error event mid-stream. */
export function shutdownError(): HttpError {
  return new HttpError(503, 'overloaded', 'The server is shutting down');
}

/**
 * The error a failed request reports, or undefined when nobody is left to tell: the client
 * closed the connection. A request the closing server ended is told so (an SDK must not take
 * a stream cut by a shutdown for a complete answer).
 */
export function reportedError(e: unknown, signal: AbortSignal): HttpError | undefined {
  if (!signal.aborted) return toHttpError(e);
  return signal.reason instanceof ServerClosingError ? shutdownError() : undefined;
}

export function toHttpError(e: unknown): HttpError {
  if (e instanceof HttpError) return e;
  if (isLlamuxError(e)) {
    switch (e.code) {
      case 'INVALID_ARGUMENT':
        return new HttpError(400, 'invalid_request', e.message);
      case 'CONTEXT_OVERFLOW':
        return new HttpError(400, 'context_length', e.message);
      case 'UNSUPPORTED': // the request asks this model for what it cannot do (generate with an encoder)
        return new HttpError(400, 'invalid_request', e.message);
      case 'RPC_UNAVAILABLE':
        // an RPC server holding the model's layers is gone: this instance cannot answer
        return new HttpError(503, 'overloaded', e.message);
      case 'QUEUE_FULL':
      case 'KV_CACHE_FULL':
        return new HttpError(503, 'overloaded', e.message);
      case 'DISPOSED':
        return new HttpError(503, 'overloaded', 'The server is shutting down');
      default:
        return new HttpError(500, 'server', e.message);
    }
  }
  return new HttpError(500, 'server', e instanceof Error ? e.message : String(e));
}

/** The error body each SDK understands. */
export function errorBody(api: ApiFlavor, err: HttpError): { status: number; body: unknown } {
  if (api === 'anthropic') {
    const type = {
      invalid_request: 'invalid_request_error',
      context_length: 'invalid_request_error',
      authentication: 'authentication_error',
      forbidden: 'permission_error',
      not_found: 'not_found_error',
      too_large: 'request_too_large',
      unsupported_media_type: 'invalid_request_error',
      rate_limited: 'rate_limit_error',
      overloaded: 'overloaded_error',
      server: 'api_error',
    }[err.kind];
    const status = err.kind === 'overloaded' ? 529 : err.status;
    return { status, body: { type: 'error', error: { type, message: err.message } } };
  }
  const type = err.kind === 'server' || err.kind === 'overloaded' ? 'server_error' : 'invalid_request_error';
  const code = err.apiCode ?? {
    invalid_request: null,
    context_length: 'context_length_exceeded',
    authentication: 'invalid_api_key',
    forbidden: 'host_not_allowed',
    not_found: 'not_found',
    too_large: 'request_too_large',
    unsupported_media_type: 'unsupported_media_type',
    rate_limited: 'rate_limit_exceeded',
    overloaded: 'overloaded',
    server: null,
  }[err.kind];
  return { status: err.status, body: { error: { message: err.message, type, param: err.param ?? null, code } } };
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  const close = res.req !== undefined && closeAfterResponse.has(res.req) ? { connection: 'close' } : {};
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers, ...close });
  res.end(text);
  if ('connection' in close) res.once('finish', () => res.req?.socket.destroy());
}

/** Headers an error response carries besides its body (`Retry-After`). */
export function errorHeaders(err: HttpError): Record<string, string> {
  return err.retryAfter !== undefined ? { 'retry-after': String(err.retryAfter) } : {};
}

export function sendError(res: ServerResponse, api: ApiFlavor, err: HttpError, headers: Record<string, string> = {}): void {
  const { status, body } = errorBody(api, err);
  sendJson(res, status, body, { ...errorHeaders(err), ...headers });
}

/** Whether a Content-Type header names JSON (`application/json`, any parameters). */
export function isJsonContentType(value: string | undefined): boolean {
  if (value === undefined) return false;
  const type = value.split(';')[0]!.trim().toLowerCase();
  return type === 'application/json';
}

const utf8 = new TextDecoder('utf-8', { fatal: true });
/** Requests whose connection must close after the response (their body was not read). */
const closeAfterResponse = new WeakSet<IncomingMessage>();
/** Each request's body, read once: the router reads `model` before the endpoint reads the rest. */
const bodies = new WeakMap<IncomingMessage, Promise<unknown>>();

/**
 * Reads a JSON body of at most `limit` bytes (once per request: later calls get the same result).
 * @throws HttpError 413 (too large), 400 (not JSON), 415 (not JSON content)
 */
export function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  let body = bodies.get(req);
  if (!body) {
    body = readJsonOnce(req, limit);
    bodies.set(req, body);
  }
  return body;
}

async function readJsonOnce(req: IncomingMessage, limit: number): Promise<unknown> {
  if (!isJsonContentType(req.headers['content-type'])) {
    // A browser can send a cross-origin "simple" request (text/plain, form data) without a
    // preflight; it can never send application/json that way.
    req.resume();
    closeAfterResponse.add(req);
    const got = req.headers['content-type'];
    throw new HttpError(415, 'unsupported_media_type', `The request body must be JSON sent with "Content-Type: application/json"${got === undefined ? ' (the request had no Content-Type)' : ` (the request had ${JSON.stringify(got.slice(0, 100))})`}`);
  }
  const declared = Number(req.headers['content-length']);
  const tooLarge = (): HttpError => new HttpError(413, 'too_large', `The request body exceeds the limit of ${limit} bytes`);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume(); // discard the body; the response goes out now
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let over = false;
  await new Promise<void>((resolve, reject) => {
    const onData = (c: Buffer): void => {
      size += c.length;
      if (size > limit) {
        // Answer now and close the connection instead of reading the rest of the body.
        over = true;
        chunks.length = 0;
        req.off('data', onData);
        req.pause();
        closeAfterResponse.add(req);
        resolve();
      } else chunks.push(c);
    };
    req.on('data', onData);
    req.on('end', () => resolve());
    req.on('error', reject);
    req.on('aborted', () => reject(new HttpError(400, 'invalid_request', 'The request was aborted')));
  });
  if (over) throw tooLarge();
  let text: string;
  try {
    text = utf8.decode(Buffer.concat(chunks));
  } catch {
    throw new HttpError(400, 'invalid_request', 'The request body is not valid UTF-8');
  }
  if (text.trim() === '') throw new HttpError(400, 'invalid_request', 'The request body is empty; expected a JSON object');
  if (jsonTextDepth(text) > MAX_JSON_DEPTH) {
    throw new HttpError(400, 'invalid_request', `The request body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new HttpError(400, 'invalid_request', `The request body is not valid JSON: ${(e as Error).message}`);
  }
}

/** One readable phrase per zod issue, naming the field and what was received. */
export function describeIssues(issues: readonly z.core.$ZodIssue[], body: unknown): string {
  return formatIssues(issues, { kind: 'field', input: body });
}

/** Validates a body with a zod schema; a failure is a 400 naming each bad field. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const first = r.error.issues[0];
  throw new HttpError(400, 'invalid_request', `Invalid request body: ${describeIssues(r.error.issues, body)}`, first?.path.length ? first.path.map(String).join('.') : undefined);
}

/**
 * Server-sent events on a response, with backpressure: `send()` resolves once the socket took
 * the bytes, so a caller that awaits it stops pulling events while the client does not read (the
 * generation then pauses at its highWaterMark). A client that reads nothing for `stallMs` is
 * disconnected, which aborts its request.
 */
export class SseWriter {
  #res: ServerResponse;
  #stallMs: number;
  #waiting: { streamsWaiting: number } | undefined;
  /** `waiting.streamsWaiting` counts the streams held up by their client. */
  constructor(res: ServerResponse, headers: Record<string, string> = {}, stallMs = 60_000, waiting?: { streamsWaiting: number }) {
    this.#res = res;
    this.#stallMs = stallMs;
    this.#waiting = waiting;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      ...headers,
    });
    res.socket?.setNoDelay(true);
    res.flushHeaders();
  }
  get closed(): boolean {
    return this.#res.destroyed || this.#res.writableEnded;
  }
  async send(data: unknown, event?: string): Promise<void> {
    if (this.closed) return;
    const ok = this.#res.write(`${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
    if (ok || this.closed) return;
    if (this.#waiting) this.#waiting.streamsWaiting++;
    try {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          this.#res.off('drain', done);
          this.#res.off('close', done);
          resolve();
        };
        const timer = setTimeout(() => {
          this.#res.destroy(new Error(`The client read nothing for ${this.#stallMs} ms`));
          done();
        }, this.#stallMs);
        this.#res.once('drain', done);
        this.#res.once('close', done);
      });
    } finally {
      if (this.#waiting) this.#waiting.streamsWaiting--;
    }
  }
  end(): void {
    if (!this.closed) this.#res.end();
  }
}

/**
 * Waits for the first event of a stream before anything is written, so that errors known before
 * the first byte (bad arguments, a full queue) still get their HTTP status. Returns the stream
 * with that event put back in front.
 */
export async function firstEventFirst<T>(gen: AsyncGenerator<T, void, undefined>): Promise<AsyncGenerator<T, void, undefined>> {
  const first = await gen.next();
  return (async function* () {
    if (first.done) return;
    yield first.value;
    yield* gen;
  })();
}
