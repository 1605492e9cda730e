// A hub of the tests' own on 127.0.0.1 that answers like huggingface.co: the tree API with LFS
// sha256s, the model API's siblings, `resolve` answering 302 to a CDN on another port (another
// origin, as the real CDN is), and a CDN with ranges (206, Content-Range), its own ETags and
// faults to order: dropped connections, ignored ranges, 429/503, wrong checksums.
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface SeenRequest {
  server: 'hub' | 'cdn';
  method: string;
  path: string;
  range?: string;
  authorization?: string;
}

export interface Faults {
  /** Drop the connection after this many body bytes, this many times (CDN GETs of `file`). */
  drop?: { file: string; afterBytes: number; times: number };
  /** The CDN answers 200 with the whole file to Range requests. */
  ignoreRange?: boolean;
  /** The CDN's ETag for a file (default "cdn-<sha prefix>"); change it to play a re-uploaded file. */
  etag?: Record<string, string>;
  /** These statuses first, in order (taken from the list), on any request whose path includes `match`. */
  statuses?: { match: string; list: number[]; retryAfter?: string };
  /** The listing gives this sha256 for a file instead of the true one. */
  listedSha?: Record<string, string>;
  /** The listing gives this size for a file instead of the true one. */
  listedSize?: Record<string, number>;
  /** The listing has no lfs block (the sha256 then comes from the resolve 302's X-Linked-Etag). */
  noLfs?: boolean;
  /** The tree API answers 404 (a mirror with only /api/models/{repo}/revision/{rev}). */
  noTree?: boolean;
  /** Tree pages of this many entries, linked with rel="next". */
  pageSize?: number;
  /** Paths the listing holds without bytes behind them (hostile names). */
  extraListed?: string[];
  /** Hold the body after this many bytes until released (for aborts mid-transfer). */
  stallAfter?: { file: string; afterBytes: number };
}

export interface FakeHub {
  url: string;
  cdnUrl: string;
  requests: SeenRequest[];
  faults: Faults;
  /** Repositories: repo → path → bytes. */
  repos: Map<string, Map<string, Uint8Array>>;
  /** Repositories that need this token (401 without it). */
  privateRepos: Map<string, string>;
  addRepo(repo: string, files: Record<string, Uint8Array>): void;
  close(): Promise<void>;
}

export const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: Server; url: string }> {
  const server = createServer(handler);
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })));
}

export async function startFakeHub(): Promise<FakeHub> {
  const repos = new Map<string, Map<string, Uint8Array>>();
  const blobs = new Map<string, { bytes: Uint8Array; path: string }>();
  const privateRepos = new Map<string, string>();
  const requests: SeenRequest[] = [];
  const faults: Faults = {};

  const log = (server: SeenRequest['server'], req: IncomingMessage) =>
    requests.push({
      server,
      method: req.method!,
      path: req.url!,
      ...(req.headers.range ? { range: req.headers.range } : {}),
      ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
    });

  const fault = (req: IncomingMessage, res: ServerResponse): boolean => {
    const s = faults.statuses;
    if (s && req.url!.includes(s.match) && s.list.length > 0) {
      const status = s.list.shift()!;
      res.writeHead(status, { 'content-type': 'application/json', ...(s.retryAfter !== undefined ? { 'retry-after': s.retryAfter } : {}) }).end('{"error":"busy"}');
      return true;
    }
    return false;
  };

  const cdn = await listen((req, res) => {
    log('cdn', req);
    if (fault(req, res)) return;
    const m = /^\/blobs\/([0-9a-f]{64})\?/.exec(req.url!);
    const blob = m ? blobs.get(m[1]!) : undefined;
    if (!blob) return void res.writeHead(404).end();
    const body = blob.bytes;
    const etag = `"${faults.etag?.[blob.path] ?? `cdn-${m![1]!.slice(0, 16)}`}"`;
    let start = 0;
    let status = 200;
    const headers: Record<string, string | number> = { etag, 'accept-ranges': 'bytes', 'content-type': 'application/octet-stream' };
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    if (range && !faults.ignoreRange) {
      start = Number(range[1]);
      if (start >= body.length) return void res.writeHead(416, { 'content-range': `bytes */${body.length}` }).end();
      status = 206;
      headers['content-range'] = `bytes ${start}-${body.length - 1}/${body.length}`;
    }
    headers['content-length'] = body.length - start;
    res.writeHead(status, headers);
    if (req.method === 'HEAD') return void res.end();
    const slice = body.subarray(start);
    const drop = faults.drop;
    if (drop && drop.file === blob.path && drop.times > 0 && slice.length > drop.afterBytes) {
      drop.times--;
      res.write(slice.subarray(0, drop.afterBytes), () => setTimeout(() => res.socket?.destroy(), 20));
      return;
    }
    const stall = faults.stallAfter;
    if (stall && stall.file === blob.path && slice.length > stall.afterBytes) {
      res.write(slice.subarray(0, stall.afterBytes)); // and nothing more: the client gives up
      return;
    }
    res.end(slice);
  });

  const hub = await listen((req, res) => {
    log('hub', req);
    if (fault(req, res)) return;
    const url = new URL(req.url!, 'http://x');
    const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
      res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
    const repoOf = (org: string, name: string): Map<string, Uint8Array> | 'denied' | undefined => {
      const repo = `${org}/${name}`;
      const token = privateRepos.get(repo);
      if (token !== undefined && req.headers.authorization !== `Bearer ${token}`) return 'denied';
      return repos.get(repo);
    };
    const missingRepo = (r: 'denied' | undefined) =>
      r === 'denied'
        ? json(401, { error: 'Invalid credentials' }, { 'x-error-code': 'GatedRepo', 'x-error-message': 'Access to this repository is restricted' })
        : json(404, { error: 'Repository not found' }, { 'x-error-code': 'RepoNotFound' });
    const listing = (files: Map<string, Uint8Array>) => [
      ...[...files].map(([path, bytes]) => {
        const sha = faults.listedSha?.[path] ?? sha256(bytes);
        const size = faults.listedSize?.[path] ?? bytes.length;
        return { path, size, sha, bytes };
      }),
      ...(faults.extraListed ?? []).map((path) => ({ path, size: 1000, sha: 'a'.repeat(64), bytes: undefined })),
    ];

    let m = /^\/api\/models\/([^/]+)\/([^/]+)\/tree\/([^/?]+)$/.exec(url.pathname);
    if (m) {
      if (faults.noTree) return json(404, { error: 'Not found' });
      const r = repoOf(m[1]!, m[2]!);
      if (r === undefined || r === 'denied') return missingRepo(r);
      if (url.searchParams.get('recursive') !== 'true') return json(400, { error: 'this imitation only answers recursive=true' });
      const all = listing(r).map((f) => ({
        type: 'file',
        oid: createHash('sha1').update(f.path).digest('hex'),
        size: f.size,
        path: f.path,
        ...(faults.noLfs ? {} : { lfs: { oid: f.sha, size: f.size, pointerSize: 134 } }),
      }));
      const dirs = [...new Set(all.flatMap((f) => (f.path.includes('/') ? [f.path.slice(0, f.path.lastIndexOf('/'))] : [])))].map((path) => ({ type: 'directory', oid: '0'.repeat(40), size: 0, path }));
      const entries = [...dirs, ...all];
      const size = faults.pageSize ?? entries.length;
      const cursor = Number(url.searchParams.get('cursor') ?? 0);
      const next = cursor + size < entries.length ? `<${url.pathname}?recursive=true&cursor=${cursor + size}>; rel="next"` : undefined;
      return json(200, entries.slice(cursor, cursor + size), next ? { link: next } : {});
    }
    m = /^\/api\/models\/([^/]+)\/([^/]+)\/revision\/([^/?]+)$/.exec(url.pathname);
    if (m) {
      const r = repoOf(m[1]!, m[2]!);
      if (r === undefined || r === 'denied') return missingRepo(r);
      return json(200, {
        id: `${m[1]}/${m[2]}`,
        sha: 'c0ffee'.repeat(6) + 'c0ff',
        siblings: listing(r).map((f) => ({ rfilename: f.path, size: f.size, ...(faults.noLfs ? {} : { lfs: { sha256: f.sha, size: f.size, pointerSize: 134 } }) })),
      });
    }
    m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
    if (m) {
      const r = repoOf(m[1]!, m[2]!);
      if (r === undefined || r === 'denied') return missingRepo(r);
      const path = m[4]!.split('/').map(decodeURIComponent).join('/');
      const bytes = r.get(path);
      if (!bytes) return json(404, { error: 'Entry not found' }, { 'x-error-code': 'EntryNotFound' });
      const sha = faults.listedSha?.[path] ?? sha256(bytes);
      blobs.set(sha256(bytes), { bytes, path });
      res.writeHead(302, {
        location: `${cdnUrl}/blobs/${sha256(bytes)}?expires=9999999999&signature=abc`,
        'x-linked-etag': `"${sha}"`,
        'x-linked-size': String(bytes.length),
        'x-repo-commit': 'c0ffee'.repeat(6) + 'c0ff',
        etag: `"${sha}"`,
      });
      return void res.end();
    }
    json(404, { error: 'no such route' });
  });
  const cdnUrl = cdn.url;

  return {
    url: hub.url,
    cdnUrl,
    requests,
    faults,
    repos,
    privateRepos,
    addRepo(repo, files) {
      repos.set(repo, new Map(Object.entries(files)));
      for (const [path, bytes] of Object.entries(files)) blobs.set(sha256(bytes), { bytes, path });
    },
    close: () =>
      Promise.all(
        [hub.server, cdn.server].map(
          (s) =>
            new Promise<void>((r) => {
              s.closeAllConnections();
              s.close(() => r());
            }),
        ),
      ).then(() => {}),
  };
}

/** Requests the CDN served file bytes for (GETs), with their Range headers. */
export const cdnGets = (hub: FakeHub): SeenRequest[] => hub.requests.filter((r) => r.server === 'cdn' && r.method === 'GET');
