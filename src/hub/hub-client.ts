// HTTP for pull(): Node's fetch with the hub's token, redirects followed by hand (the token
// never leaves the hub's origin, and the 302 of `resolve` carries the file's sha256), typed
// errors per status, retries with exponential backoff and Retry-After, and the file listing.
import { abortError, isLlamuxError } from '../errors.js';
import { HubError } from './errors.js';

export interface HubClientOptions {
  /** The hub's base URL, e.g. https://huggingface.co. */
  endpoint: string;
  /** Sent as `Authorization: Bearer …` to the hub's origin only. */
  token?: string | undefined;
  /** Retries after a network error, 429 or 5xx (default 5). */
  retries: number;
  /** First backoff delay; doubles per retry, capped at 30 s (default 500 ms). */
  retryDelayMs: number;
  signal?: AbortSignal | undefined;
}

export interface RemoteEntry {
  /** Path inside the repository. */
  path: string;
  size?: number;
  /** LFS sha256 (hex), when the hub gives it. */
  sha256?: string;
}

const MAX_REDIRECTS = 10;
const MAX_RETRY_AFTER_MS = 120_000;

/** A response worth retrying (429, 5xx); the caller waits `retryAfterMs` when the server said. */
export class RetryableStatus extends Error {
  constructor(
    readonly status: number,
    readonly url: string,
    readonly retryAfterMs: number | undefined,
  ) {
    super(`HTTP ${status} from ${url}`);
  }
}

function retryAfter(h: Headers): number | undefined {
  const v = h.get('retry-after');
  if (v === null) return undefined;
  const s = Number(v);
  const ms = Number.isFinite(s) ? s * 1000 : Date.parse(v) - Date.now();
  return Number.isFinite(ms) ? Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS) : undefined;
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal, 'The pull'));
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(abortError(signal, 'The pull'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export class HubClient {
  readonly endpoint: string;
  readonly #opts: HubClientOptions;
  readonly #origin: string;

  constructor(opts: HubClientOptions) {
    this.#opts = opts;
    this.endpoint = opts.endpoint.replace(/\/+$/, '');
    this.#origin = new URL(this.endpoint).origin;
  }

  get signal(): AbortSignal | undefined {
    return this.#opts.signal;
  }

  /** The URL of a repository file: `{endpoint}/{repo}/resolve/{revision}/{file}`. */
  resolveUrl(repo: string, revision: string, file: string): string {
    return `${this.endpoint}/${repo}/resolve/${encodeURIComponent(revision)}/${file.split('/').map(encodeURIComponent).join('/')}`;
  }

  /**
   * One request, redirects followed (at most 10; the token only to the hub's origin), the
   * status checked: 2xx and 416 come back, 429/5xx throw RetryableStatus, 401/403 throw
   * DOWNLOAD_UNAUTHORIZED, 404 MODEL_NOT_FOUND, anything else DOWNLOAD_FAILED. `hops` gets
   * the headers of every redirect (the hub's 302 carries X-Linked-Etag).
   */
  async request(url: string, init: { method?: string; headers?: Record<string, string>; signal?: AbortSignal; hops?: Headers[] } = {}): Promise<Response> {
    let current = url;
    for (let hop = 0; ; hop++) {
      const headers: Record<string, string> = { 'user-agent': 'llamux', ...init.headers };
      if (this.#opts.token && new URL(current).origin === this.#origin) headers.authorization = `Bearer ${this.#opts.token}`;
      const res = await fetch(current, { method: init.method ?? 'GET', headers, redirect: 'manual', ...(init.signal ? { signal: init.signal } : {}) });
      if (res.status >= 300 && res.status < 400 && res.headers.has('location')) {
        init.hops?.push(res.headers);
        await res.body?.cancel().catch(() => {});
        if (hop >= MAX_REDIRECTS) throw new HubError('DOWNLOAD_FAILED', `Too many redirects from ${url}`, { url });
        current = new URL(res.headers.get('location')!, current).href;
        continue;
      }
      if ((res.status >= 200 && res.status < 300) || res.status === 416) return res;
      await res.body?.cancel().catch(() => {});
      if (res.status === 429 || res.status >= 500) throw new RetryableStatus(res.status, current, retryAfter(res.headers));
      throw this.#statusError(res, url);
    }
  }

  #statusError(res: Response, url: string): HubError {
    const why = res.headers.get('x-error-message') ?? res.headers.get('x-error-code');
    const detail = why ? ` (${why})` : '';
    if (res.status === 401 || res.status === 403) {
      const hint = this.#opts.token
        ? 'the token in HF_TOKEN was refused: check it can read this repository, and accept its licence on the hub if it is gated'
        : 'the repository may be private or gated, or may not exist: set HF_TOKEN to a token that can read it';
      return new HubError('DOWNLOAD_UNAUTHORIZED', `HTTP ${res.status} from ${url}${detail}: ${hint}`, { url, status: res.status });
    }
    if (res.status === 404) return new HubError('MODEL_NOT_FOUND', `Not found (HTTP 404) at ${url}${detail}`, { url, status: 404 });
    return new HubError('DOWNLOAD_FAILED', `HTTP ${res.status} from ${url}${detail}`, { url, status: res.status });
  }

  /**
   * Runs `fn` again after a network error, 429 or 5xx, waiting 500 ms, 1 s, 2 s ... (or what
   * Retry-After says). `fn` gets the attempt number; `progressed()` resets the count (a
   * download that moved forward before it broke starts its retries over).
   */
  async withRetries<T>(what: string, fn: (attempt: number, progressed: () => void) => Promise<T>): Promise<T> {
    const signal = this.#opts.signal;
    let failures = 0;
    for (let attempt = 0; ; attempt++) {
      if (signal?.aborted) throw abortError(signal, 'The pull');
      try {
        return await fn(attempt, () => (failures = 0));
      } catch (e) {
        if (signal?.aborted) throw abortError(signal, 'The pull');
        if (isLlamuxError(e)) throw e;
        if (failures >= this.#opts.retries) {
          const msg = e instanceof RetryableStatus ? e.message : `${(e as Error).message}${(e as Error).cause ? `: ${String(((e as Error).cause as Error).message ?? (e as Error).cause)}` : ''}`;
          throw new HubError('DOWNLOAD_FAILED', `${what} failed after ${failures + 1} attempts: ${msg}`, {
            cause: e,
            ...(e instanceof RetryableStatus ? { url: e.url, status: e.status } : {}),
          });
        }
        const backoff = Math.min(30_000, this.#opts.retryDelayMs * 2 ** failures) * (0.75 + Math.random() * 0.25);
        failures++;
        await sleep(e instanceof RetryableStatus && e.retryAfterMs !== undefined ? e.retryAfterMs : backoff, signal);
      }
    }
  }

  /**
   * Every file of a repository at a revision: the tree API (`/api/models/{repo}/tree/{rev}?recursive=true`,
   * pages followed through the Link header), or where a mirror lacks it, the model API's
   * siblings (`/api/models/{repo}/revision/{rev}?blobs=true`).
   */
  async listFiles(repo: string, revision: string): Promise<RemoteEntry[]> {
    const rev = encodeURIComponent(revision);
    try {
      const out: RemoteEntry[] = [];
      let next: string | undefined = `${this.endpoint}/api/models/${repo}/tree/${rev}?recursive=true`;
      while (next) {
        const url: string = next;
        const page = await this.withRetries(`Listing ${repo}`, async () => {
          const res = await this.request(url, this.#signalInit());
          return { body: (await res.json()) as unknown, link: res.headers.get('link') };
        });
        if (!Array.isArray(page.body)) throw new HubError('DOWNLOAD_FAILED', `The file list of ${repo} is not a JSON array (${url})`, { url });
        for (const e of page.body as Array<Record<string, unknown>>) {
          if (e?.type !== 'file' || typeof e.path !== 'string') continue;
          const lfs = e.lfs as { oid?: unknown; sha256?: unknown; size?: unknown } | undefined;
          const sha = lfs?.oid ?? lfs?.sha256;
          out.push({
            path: e.path,
            ...(typeof e.size === 'number' ? { size: e.size } : typeof lfs?.size === 'number' ? { size: lfs.size } : {}),
            ...(typeof sha === 'string' && /^[0-9a-f]{64}$/i.test(sha) ? { sha256: sha.toLowerCase() } : {}),
          });
        }
        const m = page.link ? /<([^>]+)>\s*;\s*rel="?next"?/.exec(page.link) : null;
        next = m ? new URL(m[1]!, url).href : undefined;
      }
      return out;
    } catch (e) {
      if (!(e instanceof HubError) || e.code !== 'MODEL_NOT_FOUND') throw e;
    }
    const url = `${this.endpoint}/api/models/${repo}/revision/${rev}?blobs=true`;
    const body = await this.withRetries(`Listing ${repo}`, async () => (await (await this.request(url, this.#signalInit())).json()) as { siblings?: unknown });
    if (!Array.isArray(body.siblings)) throw new HubError('DOWNLOAD_FAILED', `The model info of ${repo} has no file list (${url})`, { url });
    return (body.siblings as Array<Record<string, unknown>>).flatMap((s) => {
      if (typeof s?.rfilename !== 'string') return [];
      const lfs = s.lfs as { sha256?: unknown; size?: unknown } | undefined;
      const size = typeof s.size === 'number' ? s.size : typeof lfs?.size === 'number' ? lfs.size : undefined;
      return [{ path: s.rfilename, ...(size !== undefined ? { size } : {}), ...(typeof lfs?.sha256 === 'string' && /^[0-9a-f]{64}$/i.test(lfs.sha256) ? { sha256: lfs.sha256.toLowerCase() } : {}) }];
    });
  }

  /** A file's sha256, size and commit from a HEAD of its resolve URL (the hub's X-Linked-Etag / X-Linked-Size). */
  async headFile(url: string): Promise<{ sha256?: string; size?: number; commit?: string }> {
    const hops: Headers[] = [];
    const res = await this.withRetries(`HEAD ${url}`, () => this.request(url, { method: 'HEAD', hops, ...this.#signalInit() }));
    const all = [...hops, res.headers];
    const pick = (name: string) => all.map((h) => h.get(name)).find((v) => v !== null) ?? undefined;
    const etag = (pick('x-linked-etag') ?? hops[0]?.get('etag') ?? res.headers.get('etag') ?? '').replace(/^W\//, '').replaceAll('"', '');
    const size = Number(pick('x-linked-size') ?? res.headers.get('content-length'));
    const commit = pick('x-repo-commit');
    return {
      ...(/^[0-9a-f]{64}$/i.test(etag) ? { sha256: etag.toLowerCase() } : {}),
      ...(Number.isSafeInteger(size) && size >= 0 ? { size } : {}),
      ...(commit ? { commit } : {}),
    };
  }

  #signalInit(): { signal?: AbortSignal } {
    return this.#opts.signal ? { signal: this.#opts.signal } : {};
  }
}
