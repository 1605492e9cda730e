// Remote images (`--allow-remote-media`): an `http(s)` image URL of a request fetched by the
// server, bounded in time, size and redirects, and handed on as a data: URL so the rest of the
// path (checks, tokenizing, the caches' media hashes, stored responses) sees bytes only. Off by
// default: the server fetches nothing unless the operator opts in.
import { HttpError } from './http.js';

export interface RemoteMediaOptions {
  /** Largest body accepted (the model's mediaLimits.maxBytes), enforced while reading. */
  maxBytes: number;
  /** Time for the whole fetch, redirects and body included. */
  timeoutMs: number;
  /** Redirects followed at most. */
  maxRedirects: number;
  /** The request's signal: a client that leaves stops the fetch. */
  signal: AbortSignal;
}

/** Redirects one fetch follows at most. */
export const MAX_MEDIA_REDIRECTS = 3;

/** Whether a media URL is remote (http or https). */
export function isRemoteUrl(url: string): boolean {
  return /^https?:\/\//i.test(url);
}

/** A short form of a URL for error messages (no query string: it may hold a token). */
function shown(url: string): string {
  const s = url.replace(/[?#].*$/s, '');
  return JSON.stringify(s.length > 120 ? `${s.slice(0, 117)}...` : s);
}

class FetchRefused extends Error {}

/** Reads a body chunk by chunk, refusing it as soon as it passes `max` bytes. */
async function readCapped(body: ReadableStream<Uint8Array>, max: number): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > max) throw new FetchRefused(`the body passes ${max} bytes (mediaLimits.maxBytes)`);
      chunks.push(value);
    }
  } finally {
    // stops the download at once when the cap or an abort ended the loop
    await reader.cancel().catch(() => {});
  }
  return Buffer.concat(chunks);
}

/**
 * Fetches one image URL and returns it as a data: URL. Every failure (bad URL, unreachable
 * host, timeout, HTTP error, too many redirects, too big, not an image) is a 400 that names the
 * part (`where`, `param`); a request aborted by its client rethrows the abort.
 */
export async function fetchRemoteImage(url: string, where: string, param: string, o: RemoteMediaOptions): Promise<string> {
  const fail = (why: string): HttpError => new HttpError(400, 'invalid_request', `${where}: the image at ${shown(url)} could not be used: ${why}`, param);
  const timeout = AbortSignal.timeout(o.timeoutMs);
  const signal = AbortSignal.any([o.signal, timeout]);
  let at = url;
  try {
    for (let hop = 0; ; hop++) {
      let target: URL;
      try {
        target = new URL(at);
      } catch {
        throw new FetchRefused('not a valid URL');
      }
      if (target.protocol !== 'http:' && target.protocol !== 'https:') throw new FetchRefused(`a redirect to a ${target.protocol} URL is not followed`);
      const r = await fetch(target, { signal, redirect: 'manual', headers: { accept: 'image/*' } });
      if (r.status >= 300 && r.status < 400 && r.headers.has('location')) {
        await r.body?.cancel().catch(() => {});
        if (hop >= o.maxRedirects) throw new FetchRefused(`more than ${o.maxRedirects} redirects`);
        at = new URL(r.headers.get('location')!, target).href;
        continue;
      }
      if (!r.ok) {
        await r.body?.cancel().catch(() => {});
        throw new FetchRefused(`the server answered HTTP ${r.status}`);
      }
      const type = (r.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
      if (!type.startsWith('image/')) {
        await r.body?.cancel().catch(() => {});
        throw new FetchRefused(`its content type is ${type ? JSON.stringify(type.slice(0, 64)) : 'missing'}, not an image/* type`);
      }
      const length = Number(r.headers.get('content-length') ?? NaN);
      if (length > o.maxBytes) {
        await r.body?.cancel().catch(() => {});
        throw new FetchRefused(`its ${length} bytes pass ${o.maxBytes} (mediaLimits.maxBytes)`);
      }
      const bytes = r.body ? await readCapped(r.body, o.maxBytes) : new Uint8Array();
      return `data:${type};base64,${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64')}`;
    }
  } catch (e) {
    if (o.signal.aborted) throw o.signal.reason ?? e;
    if (e instanceof FetchRefused) throw fail(e.message);
    if (timeout.aborted) throw fail(`no complete answer within ${o.timeoutMs} ms`);
    const cause = (e as { cause?: { code?: unknown; message?: unknown } }).cause;
    const detail = typeof cause?.code === 'string' ? cause.code : typeof cause?.message === 'string' ? cause.message : (e as Error).message;
    throw fail(`the host could not be reached (${String(detail).slice(0, 120)})`);
  }
}

/** The media of a request to fetch: each remote URL with where it sits, and how to put the result back. */
export interface RemotePart {
  url: string;
  where: string;
  param: string;
  set(dataUrl: string): void;
}

/** Fetches every remote part at once and writes each back as a data: URL. */
export async function resolveRemoteParts(parts: readonly RemotePart[], o: RemoteMediaOptions): Promise<void> {
  if (parts.length === 0) return;
  // one failure stops the other fetches (the request is answered with the first error)
  const siblings = new AbortController();
  const each = { ...o, signal: AbortSignal.any([o.signal, siblings.signal]) };
  try {
    const urls = await Promise.all(parts.map((p) => fetchRemoteImage(p.url, p.where, p.param, each)));
    parts.forEach((p, i) => p.set(urls[i]!));
  } finally {
    siblings.abort();
  }
}
