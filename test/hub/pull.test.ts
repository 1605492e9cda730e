import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HubError, listModels, loadModel, pull, removeModel, type PullProgress } from '../../src/index.js';
import { encodeGguf, val, type GgufSpec } from '../../src/gguf/index.js';
import { buildTestModel } from '../../src/gguf/fixtures.js';
import { tempDir } from '../helpers/paths.js';
import { cdnGets, sha256, startFakeHub, type FakeHub } from './hub-server.js';

let hub: FakeHub;
let demo: Uint8Array;
let demoSpec: GgufSpec;

/** Test options: the fake hub, a fresh folder, fast retries. */
const opts = (dir: string, more: Record<string, unknown> = {}) => ({ modelsDir: dir, endpoint: hub.url, retryDelayMs: 5, token: '', ...more });

async function rejection(p: Promise<unknown>): Promise<HubError> {
  try {
    await p;
  } catch (e) {
    return e as HubError;
  }
  throw new Error('expected a rejection');
}

/** Every file under dir, relative, sorted. */
const filesUnder = (dir: string): string[] =>
  existsSync(dir) ? readdirSync(dir, { recursive: true, withFileTypes: true }).filter((d) => d.isFile()).map((d) => join(d.parentPath, d.name).slice(dir.length + 1)).sort() : [];

/** A real split GGUF of the demo model: part 1 with the metadata and half the tensors, part 2 the rest. */
function splitDemo(): [Uint8Array, Uint8Array] {
  const md = [...(demoSpec.metadata instanceof Map ? demoSpec.metadata : new Map(demoSpec.metadata as Array<[string, never]>))];
  const n = demoSpec.tensors.length;
  const half = Math.ceil(n / 2);
  const split = (no: number) => [
    ['split.no', val.u16(no)],
    ['split.count', val.u16(2)],
    ['split.tensors.count', val.i32(n)],
  ] as const;
  return [
    encodeGguf({ metadata: [...md, ...split(0)], tensors: demoSpec.tensors.slice(0, half) }),
    encodeGguf({ metadata: [...split(1)], tensors: demoSpec.tensors.slice(half) }),
  ];
}

beforeAll(async () => {
  hub = await startFakeHub();
  const built = buildTestModel('demo');
  demoSpec = built.gguf;
  demo = encodeGguf(demoSpec);
  const small = (seed: number, n = 300_000) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff);
  hub.addRepo('acme/Demo-GGUF', {
    'README.md': new TextEncoder().encode('# demo\n'),
    'Demo-Q4_K_M.gguf': demo,
    'Demo-Q8_0.gguf': small(8),
    'mmproj-Demo-F16.gguf': small(16, 50_000),
    'mmproj-Demo-Q8_0.gguf': small(17, 40_000),
    'Demo-MTP-Q8_0.gguf': small(18, 30_000),
  });
  const [p1, p2] = splitDemo();
  hub.addRepo('acme/Split-GGUF', { 'BF16/Split-BF16-00001-of-00002.gguf': p1, 'BF16/Split-BF16-00002-of-00002.gguf': p2, 'Split-Q2_K.gguf': small(2) });
  hub.addRepo('acme/Big', { 'Big-Q4_0.gguf': small(40, 2_000_000) });
});

afterAll(() => hub?.close());

afterEach(() => {
  for (const k of Object.keys(hub.faults)) delete (hub.faults as Record<string, unknown>)[k];
  hub.requests.length = 0;
  hub.privateRepos.clear();
});

describe('pull()', () => {
  it('pulls a GGUF through resolve → 302 → CDN, verifies it, records it, and it loads', async () => {
    const dir = tempDir('pull-full');
    const seen: PullProgress[] = [];
    const m = await pull('acme/Demo-GGUF:q4_k_m', opts(dir, { onProgress: (p: PullProgress) => seen.push(p) }));
    expect(m).toMatchObject({ reference: 'acme/Demo-GGUF:Q4_K_M', name: 'acme/Demo-GGUF', quant: 'Q4_K_M', size: demo.length });
    expect(m.source).toEqual({ type: 'hf', endpoint: hub.url, repo: 'acme/Demo-GGUF', revision: 'main', commit: null });
    expect(m.path).toBe(join(dir, 'hf', 'acme', 'Demo-GGUF', 'Demo-Q4_K_M.gguf'));
    expect(m.files).toEqual([{ role: 'model', file: 'Demo-Q4_K_M.gguf', path: m.path, size: demo.length, sha256: sha256(demo) }]);
    expect(sha256(readFileSync(m.path))).toBe(sha256(demo));
    // the listing, the resolve (302) and the CDN body
    expect(hub.requests.map((r) => `${r.server} ${r.method} ${r.path.split('?')[0]}`)).toEqual([
      'hub GET /api/models/acme/Demo-GGUF/tree/main',
      'hub GET /acme/Demo-GGUF/resolve/main/Demo-Q4_K_M.gguf',
      `cdn GET /blobs/${sha256(demo)}`,
    ]);
    expect(seen.at(-1)).toEqual({ file: 'Demo-Q4_K_M.gguf', index: 0, count: 1, done: demo.length, total: demo.length, overallDone: demo.length, overallTotal: demo.length, cached: false });
    expect(filesUnder(dir)).toEqual(['hf/acme/Demo-GGUF/Demo-Q4_K_M.gguf', 'manifest.json']);
    expect(await listModels({ modelsDir: dir })).toEqual([m]);
    const model = await loadModel(m.path);
    try {
      expect(model.metadata.name).toBe('llamux-scripted-demo');
    } finally {
      await model.dispose();
    }

    // A second pull finds the verified file and transfers nothing.
    hub.requests.length = 0;
    const again = await pull('acme/Demo-GGUF', opts(dir)); // no tag: Q4_K_M is the default
    expect(again.reference).toBe('acme/Demo-GGUF:Q4_K_M');
    expect(cdnGets(hub)).toEqual([]);
    expect(await listModels({ modelsDir: dir })).toHaveLength(1);
  });

  it('sends HF_TOKEN to the hub only, never to the CDN it redirects to; 401 without it names HF_TOKEN', async () => {
    const dir = tempDir('pull-token');
    hub.privateRepos.set('acme/Demo-GGUF', 'hf_secret');
    const denied = await rejection(pull('acme/Demo-GGUF:Q8_0', opts(dir)));
    expect(denied).toBeInstanceOf(HubError);
    expect(denied.code).toBe('DOWNLOAD_UNAUTHORIZED');
    expect(denied.status).toBe(401);
    expect(denied.message).toMatch(/HTTP 401 from .*\/api\/models\/acme\/Demo-GGUF\/tree\/main\?\S* \(Access to this repository is restricted\): .*set HF_TOKEN/);
    const wrong = await rejection(pull('acme/Demo-GGUF:Q8_0', opts(dir, { token: 'hf_wrong' })));
    expect(wrong.message).toMatch(/the token in HF_TOKEN was refused/);
    hub.requests.length = 0;
    const prev = process.env.HF_TOKEN;
    process.env.HF_TOKEN = 'hf_secret';
    try {
      const { token: _omit, ...noToken } = opts(dir);
      await pull('acme/Demo-GGUF:Q8_0', noToken);
    } finally {
      if (prev === undefined) delete process.env.HF_TOKEN;
      else process.env.HF_TOKEN = prev;
    }
    expect(hub.requests.filter((r) => r.server === 'hub').every((r) => r.authorization === 'Bearer hf_secret')).toBe(true);
    expect(hub.requests.filter((r) => r.server === 'cdn').length).toBe(1);
    expect(hub.requests.filter((r) => r.server === 'cdn').every((r) => r.authorization === undefined)).toBe(true);
  });

  it('404: an unknown repository or file is MODEL_NOT_FOUND; an unknown quant lists the tags', async () => {
    const dir = tempDir('pull-404');
    const repo = await rejection(pull('acme/Nope', opts(dir)));
    expect(repo.code).toBe('MODEL_NOT_FOUND');
    expect(repo.message).toMatch(/Not found \(HTTP 404\) at .*\/api\/models\/acme\/Nope\/revision\/main\?blobs=true \(RepoNotFound\)/);
    const file = await rejection(pull('acme/Demo-GGUF/Other.gguf', opts(dir)));
    expect(file.code).toBe('MODEL_NOT_FOUND');
    expect(file.message).toBe('acme/Demo-GGUF has no file Other.gguf; its GGUF files: Demo-MTP-Q8_0.gguf, Demo-Q4_K_M.gguf, Demo-Q8_0.gguf, mmproj-Demo-F16.gguf, mmproj-Demo-Q8_0.gguf');
    const tag = await rejection(pull('acme/Demo-GGUF:Q5_K_M', opts(dir)));
    expect(tag.code).toBe('MODEL_NOT_FOUND');
    expect(tag.message).toBe('acme/Demo-GGUF has no quant "Q5_K_M"; available: Q4_K_M, Q8_0');
    expect(tag.available).toEqual(['Q4_K_M', 'Q8_0']);
    expect(cdnGets(hub)).toEqual([]);
    expect(filesUnder(dir)).toEqual([]);
  });

  it('resumes a transfer the server dropped mid-body with a Range request', async () => {
    const dir = tempDir('pull-resume');
    hub.faults.drop = { file: 'Big-Q4_0.gguf', afterBytes: 700_000, times: 2 };
    const m = await pull('acme/Big:Q4_0', opts(dir));
    const gets = cdnGets(hub);
    expect(gets).toHaveLength(3);
    expect(gets[0]!.range).toBeUndefined();
    expect(gets[1]!.range).toBe('bytes=700000-');
    expect(gets[2]!.range).toBe('bytes=1400000-');
    expect(sha256(readFileSync(m.path))).toBe(sha256(hub.repos.get('acme/Big')!.get('Big-Q4_0.gguf')!));
    expect(filesUnder(dir)).toEqual(['hf/acme/Big/Big-Q4_0.gguf', 'manifest.json']);
  });

  it('an aborted pull keeps its partial file, and the next pull resumes it', async () => {
    const dir = tempDir('pull-abort');
    hub.faults.stallAfter = { file: 'Big-Q4_0.gguf', afterBytes: 500_000 };
    const ac = new AbortController();
    const p = pull('acme/Big:Q4_0', opts(dir, { signal: ac.signal, onProgress: (pr: PullProgress) => pr.done >= 500_000 && ac.abort(new Error('user left')) }));
    const e = await rejection(p);
    expect(e.code).toBe('ABORTED');
    expect(e.name).toBe('AbortError');
    expect(filesUnder(dir)).toEqual(['hf/acme/Big/Big-Q4_0.gguf.partial', 'hf/acme/Big/Big-Q4_0.gguf.partial.json']);
    expect(statSync(join(dir, 'hf/acme/Big/Big-Q4_0.gguf.partial')).size).toBe(500_000);
    delete hub.faults.stallAfter;
    hub.requests.length = 0;
    const m = await pull('acme/Big:Q4_0', opts(dir));
    expect(cdnGets(hub).map((r) => r.range)).toEqual(['bytes=500000-']);
    expect(sha256(readFileSync(m.path))).toBe(sha256(hub.repos.get('acme/Big')!.get('Big-Q4_0.gguf')!));
    expect(filesUnder(dir)).toEqual(['hf/acme/Big/Big-Q4_0.gguf', 'manifest.json']);
  });

  it('a server that ignores Range (200), or a file whose ETag changed, makes the download start over', async () => {
    const dir = tempDir('pull-restart');
    const big = hub.repos.get('acme/Big')!.get('Big-Q4_0.gguf')!;
    hub.faults.drop = { file: 'Big-Q4_0.gguf', afterBytes: 600_000, times: 1 };
    hub.faults.ignoreRange = true;
    const m = await pull('acme/Big:Q4_0', opts(dir));
    expect(cdnGets(hub).map((r) => r.range)).toEqual([undefined, 'bytes=600000-']);
    expect(sha256(readFileSync(m.path))).toBe(sha256(big));

    // A partial from an older upload (another CDN ETag): its 206 is refused and the file restarts.
    const dir2 = tempDir('pull-etag');
    hub.faults.stallAfter = { file: 'Big-Q4_0.gguf', afterBytes: 400_000 };
    delete hub.faults.ignoreRange;
    const ac = new AbortController();
    await rejection(pull('acme/Big:Q4_0', opts(dir2, { signal: ac.signal, onProgress: (p: PullProgress) => p.done >= 400_000 && ac.abort() })));
    delete hub.faults.stallAfter;
    hub.faults.etag = { 'Big-Q4_0.gguf': 'v2' };
    hub.requests.length = 0;
    const m2 = await pull('acme/Big:Q4_0', opts(dir2));
    expect(cdnGets(hub).map((r) => r.range)).toEqual(['bytes=400000-', undefined]);
    expect(sha256(readFileSync(m2.path))).toBe(sha256(big));
  });

  it('a wrong checksum is CHECKSUM_MISMATCH and leaves no file behind', async () => {
    const dir = tempDir('pull-sha');
    hub.faults.listedSha = { 'Demo-Q8_0.gguf': 'f'.repeat(64) };
    const e = await rejection(pull('acme/Demo-GGUF:Q8_0', opts(dir)));
    expect(e.code).toBe('CHECKSUM_MISMATCH');
    expect(e.message).toMatch(/^Demo-Q8_0\.gguf: sha256 [0-9a-f]{64} does not match the hub's f{64}; the download was removed$/);
    expect(filesUnder(dir)).toEqual([]);
    expect(await listModels({ modelsDir: dir })).toEqual([]);
  });

  it('takes the sha256 from the resolve 302 (X-Linked-Etag) when the listing has no LFS block', async () => {
    const dir = tempDir('pull-head');
    hub.faults.noLfs = true;
    const m = await pull('acme/Demo-GGUF:Q8_0', opts(dir));
    expect(m.files[0]!.sha256).toBe(sha256(hub.repos.get('acme/Demo-GGUF')!.get('Demo-Q8_0.gguf')!));
    expect(m.source).toMatchObject({ commit: 'c0ffee'.repeat(6) + 'c0ff' });
    expect(hub.requests.some((r) => r.server === 'hub' && r.method === 'HEAD')).toBe(true);
    // ... and a lying X-Linked-Etag is caught the same way
    hub.faults.listedSha = { 'mmproj-Demo-F16.gguf': '0'.repeat(64) };
    const e = await rejection(pull('acme/Demo-GGUF/mmproj-Demo-F16.gguf', opts(dir)));
    expect(e.code).toBe('CHECKSUM_MISMATCH');
  });

  it('pulls every part of a split GGUF; the path is part 1 and the model loads', async () => {
    const dir = tempDir('pull-split');
    const m = await pull('acme/Split-GGUF:bf16', opts(dir));
    expect(m.reference).toBe('acme/Split-GGUF:BF16');
    expect(m.files.map((f) => f.file)).toEqual(['BF16/Split-BF16-00001-of-00002.gguf', 'BF16/Split-BF16-00002-of-00002.gguf']);
    expect(m.path).toBe(join(dir, 'hf/acme/Split-GGUF/BF16/Split-BF16-00001-of-00002.gguf'));
    // naming part 2 pulls the same model
    const same = await pull('acme/Split-GGUF/BF16/Split-BF16-00002-of-00002.gguf', opts(dir));
    expect(same.files.map((f) => f.file)).toEqual(m.files.map((f) => f.file));
    const model = await loadModel(m.path);
    try {
      expect(model.metadata.name).toBe('llamux-scripted-demo');
      expect(model.metadata.sizeBytes).toBeGreaterThan(0);
    } finally {
      await model.dispose();
    }
  });

  it('companions: mmproj and draft when asked; a companion the repository lacks lists what it has', async () => {
    const dir = tempDir('pull-companions');
    const m = await pull('acme/Demo-GGUF:Q8_0', opts(dir, { mmproj: true, draft: true }));
    expect(m.files.map((f) => [f.role, f.file])).toEqual([
      ['model', 'Demo-Q8_0.gguf'],
      ['mmproj', 'mmproj-Demo-F16.gguf'],
      ['draft', 'Demo-MTP-Q8_0.gguf'],
    ]);
    const named = await pull('acme/Demo-GGUF:Q8_0', opts(dir, { mmproj: 'mmproj-Demo-Q8_0.gguf' }));
    expect(named.files.map((f) => f.file)).toEqual(['Demo-Q8_0.gguf', 'mmproj-Demo-Q8_0.gguf']);
    const none = await rejection(pull('acme/Big:Q4_0', opts(dir, { mmproj: true })));
    expect(none.code).toBe('MODEL_NOT_FOUND');
    expect(none.message).toBe('acme/Big has no vision projector (mmproj*.gguf)');
  });

  it('refuses file names with "..", absolute paths or backslashes from a hostile listing', async () => {
    const dir = tempDir('pull-hostile');
    hub.addRepo('evil/Repo', {});
    for (const name of ['../../escape-Q4_0.gguf', '/etc/abs-Q4_0.gguf', 'a\\..\\win-Q4_0.gguf']) {
      hub.faults.extraListed = [name];
      const e = await rejection(pull('evil/Repo:Q4_0', opts(dir)));
      expect(e.code, name).toBe('INVALID_ARGUMENT');
      expect(e.message, name).toMatch(/^Refusing file name .*: it (contains "\.\."|is an absolute path|contains a backslash)$/);
    }
    const mm = await rejection(pull('acme/Demo-GGUF:Q8_0', opts(dir, { mmproj: '../mmproj-x.gguf' })));
    expect(mm.code).toBe('MODEL_NOT_FOUND'); // not in the listing, so never a path
    expect(cdnGets(hub)).toEqual([]);
    expect(filesUnder(dir)).toEqual([]);
  });

  it('retries 429 (honouring Retry-After) and 5xx, and gives up with DOWNLOAD_FAILED', async () => {
    const dir = tempDir('pull-retry');
    hub.faults.statuses = { match: '/resolve/', list: [429, 503], retryAfter: '1' };
    const t0 = Date.now();
    const m = await pull('acme/Demo-GGUF:Q8_0', opts(dir));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1900); // two Retry-After: 1 waits
    expect(existsSync(m.path)).toBe(true);
    expect(hub.requests.filter((r) => r.path.includes('/resolve/'))).toHaveLength(3);

    hub.requests.length = 0;
    hub.faults.statuses = { match: '/tree/', list: [500, 502, 503, 504] };
    const e = await rejection(pull('acme/Demo-GGUF:Q8_0', opts(dir, { retries: 3 })));
    expect(e.code).toBe('DOWNLOAD_FAILED');
    expect(e.status).toBe(504);
    expect(e.message).toMatch(/^Listing acme\/Demo-GGUF failed after 4 attempts: HTTP 504 from /);
    expect(hub.requests).toHaveLength(4);
  });

  it('network errors (nothing listening) end in DOWNLOAD_FAILED after the retries', async () => {
    // a port that was just free: nothing listens there
    const { createServer } = await import('node:net');
    const port = await new Promise<number>((r) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => r(p));
      });
    });
    const e = await rejection(pull('acme/Demo-GGUF', { modelsDir: tempDir('pull-refused'), endpoint: `http://127.0.0.1:${port}`, retries: 1, retryDelayMs: 1 }));
    expect(e.code).toBe('DOWNLOAD_FAILED');
    expect(e.message).toMatch(/failed after 2 attempts: fetch failed: .*ECONNREFUSED/);
  });

  it('disk full: DISK_FULL before a byte moves when the listed size exceeds the free space', async () => {
    const dir = tempDir('pull-statfs');
    hub.faults.listedSize = { 'Demo-Q8_0.gguf': 2 ** 52 };
    const e = await rejection(pull('acme/Demo-GGUF:Q8_0', opts(dir)));
    expect(e.code).toBe('DISK_FULL');
    expect(e.message).toMatch(/^Not enough disk space for Demo-Q8_0\.gguf: 4503599627370496 bytes needed, \d+ free in /);
    expect(cdnGets(hub)).toEqual([]);
  });

  it('disk full mid-write (ENOSPC from the file): DISK_FULL, the partial kept consistent, and resumed later', async () => {
    const dir = tempDir('pull-enospc');
    const bytes = hub.repos.get('acme/Big')!.get('Big-Q4_0.gguf')!;
    // A real file handle whose writes fail with ENOSPC once 1 MiB is on disk, as a full disk's do.
    const openFull = async (path: string, flags: string): Promise<FileHandle> => {
      const fh = await open(path, flags);
      const write = fh.write.bind(fh) as (b: Buffer, o: number, l: number, p: number) => Promise<{ bytesWritten: number; buffer: Buffer }>;
      (fh as unknown as { write: typeof write }).write = async (b, o, l, p) => {
        const room = (1 << 20) - p;
        if (room <= 0) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' });
        return write(b, o, Math.min(l, room), p);
      };
      return fh;
    };
    const e = await rejection(pull('acme/Big:Q4_0', opts(dir, { openFile: openFull })));
    expect(e.code).toBe('DISK_FULL');
    expect(e.message).toMatch(/^Disk full while writing Big-Q4_0\.gguf to .*Big-Q4_0\.gguf\.partial \(1048576 bytes kept; free space and pull again to resume\)$/);
    expect(statSync(join(dir, 'hf/acme/Big/Big-Q4_0.gguf.partial')).size).toBe(1 << 20);
    expect(readFileSync(join(dir, 'hf/acme/Big/Big-Q4_0.gguf.partial')).equals(Buffer.from(bytes.subarray(0, 1 << 20)))).toBe(true);
    expect(existsSync(join(dir, 'hf/acme/Big/Big-Q4_0.gguf'))).toBe(false);
    expect(cdnGets(hub)).toHaveLength(1); // a full disk is not retried like the network
    hub.requests.length = 0;
    const m = await pull('acme/Big:Q4_0', opts(dir));
    expect(cdnGets(hub).map((r) => r.range)).toEqual([`bytes=${1 << 20}-`]);
    expect(sha256(readFileSync(m.path))).toBe(sha256(bytes));
  });

  it('follows tree pages (Link rel="next") and falls back to the model API where the tree API is missing', async () => {
    const dir = tempDir('pull-pages');
    hub.faults.pageSize = 2;
    const m = await pull('acme/Split-GGUF:BF16', opts(dir));
    expect(m.files).toHaveLength(2);
    // 4 entries (a folder and 3 files) in pages of 2
    expect(hub.requests.filter((r) => r.path.includes('/tree/')).map((r) => new URL(r.path, 'http://x').searchParams.get('cursor'))).toEqual([null, '2']);
    delete hub.faults.pageSize;
    hub.faults.noTree = true;
    hub.requests.length = 0;
    const q2 = await pull('acme/Split-GGUF:q2_k', opts(dir));
    expect(q2.quant).toBe('Q2_K');
    expect(hub.requests.map((r) => r.path.split('?')[0]).slice(0, 2)).toEqual(['/api/models/acme/Split-GGUF/tree/main', '/api/models/acme/Split-GGUF/revision/main']);
  });

  it('pulls a plain URL, checking the sha256 option', async () => {
    const dir = tempDir('pull-url');
    const bytes = hub.repos.get('acme/Demo-GGUF')!.get('Demo-Q8_0.gguf')!;
    const url = `${hub.cdnUrl}/blobs/${sha256(bytes)}?x=1`;
    const bad = await rejection(pull(url, { modelsDir: dir, sha256: '1'.repeat(64), retryDelayMs: 5 }));
    expect(bad.code).toBe('CHECKSUM_MISMATCH');
    const m = await pull(url, { modelsDir: dir, sha256: sha256(bytes), retryDelayMs: 5 });
    expect(m).toMatchObject({ reference: url, source: { type: 'url', url } });
    expect(m.path.startsWith(join(dir, 'url', `127.0.0.1_${new URL(hub.cdnUrl).port}`))).toBe(true);
    expect(sha256(readFileSync(m.path))).toBe(sha256(bytes));
  });

  it('two pulls of one model at once download it once', async () => {
    const dir = tempDir('pull-twice');
    const [a, b] = await Promise.all([pull('acme/Big:Q4_0', opts(dir)), pull('acme/Big:q4_0', opts(dir))]);
    expect(cdnGets(hub)).toHaveLength(1);
    expect(a.path).toBe(b.path);
    expect((await listModels({ modelsDir: dir })).map((m) => m.reference)).toEqual(['acme/Big:Q4_0']);
  });

  it('takes over lock files left by a dead process, or by an earlier process that had this pid', async () => {
    const dir = tempDir('pull-locks');
    const { spawnSync } = await import('node:child_process');
    const dead = spawnSync(process.execPath, ['-e', '0']).pid!;
    const { mkdirSync, writeFileSync } = await import('node:fs');
    mkdirSync(join(dir, 'hf/acme/Demo-GGUF'), { recursive: true });
    writeFileSync(join(dir, 'hf/acme/Demo-GGUF/Demo-Q8_0.gguf.lock'), String(dead));
    writeFileSync(join(dir, 'manifest.json.lock'), String(process.pid));
    const m = await pull('acme/Demo-GGUF:Q8_0', opts(dir));
    expect(existsSync(m.path)).toBe(true);
    expect(filesUnder(dir)).toEqual(['hf/acme/Demo-GGUF/Demo-Q8_0.gguf', 'manifest.json']);
  });

  it('a models folder that cannot be created is INVALID_ARGUMENT; a bad LLAMUX_HF_ENDPOINT too', async () => {
    const file = join(tempDir('pull-notdir'), 'a-file');
    (await import('node:fs')).writeFileSync(file, 'x');
    const e = await rejection(pull('acme/Demo-GGUF:Q8_0', opts(join(file, 'models'))));
    expect(e.code).toBe('INVALID_ARGUMENT');
    expect(e.message).toMatch(/^Cannot write the models folder .*a-file\/models: ENOTDIR/);
    const prev = process.env.LLAMUX_HF_ENDPOINT;
    process.env.LLAMUX_HF_ENDPOINT = 'huggingface.co';
    try {
      const bad = await rejection(pull('acme/Demo-GGUF', { modelsDir: tempDir('pull-badenv') }));
      expect(bad.code).toBe('INVALID_ARGUMENT');
      expect(bad.message).toBe('LLAMUX_HF_ENDPOINT must be an http(s) URL, not "huggingface.co"');
    } finally {
      if (prev === undefined) delete process.env.LLAMUX_HF_ENDPOINT;
      else process.env.LLAMUX_HF_ENDPOINT = prev;
    }
  });

  it('validates its options', async () => {
    const e = await rejection(pull('acme/Demo-GGUF', { modelsDir: '/tmp/x', retries: -1 } as never));
    expect(e.code).toBe('INVALID_ARGUMENT');
    expect(e.message).toMatch(/^Invalid pull\(\) options: /);
    const typo = await rejection(pull('acme/Demo-GGUF', { modelDir: '/tmp/x' } as never));
    expect(typo.code).toBe('INVALID_ARGUMENT');
    expect(typo.message).toContain('modelDir');
  });
});

describe('the manifest: listModels() and removeModel()', () => {
  it('lists what was pulled; rm removes the entry and the files no other entry uses', async () => {
    const dir = tempDir('pull-manifest');
    const q4 = await pull('acme/Demo-GGUF:Q4_K_M', opts(dir, { mmproj: true }));
    const q8 = await pull('acme/Demo-GGUF:Q8_0', opts(dir, { mmproj: true }));
    const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as { version: number; models: unknown[] };
    expect(manifest.version).toBe(1);
    expect(manifest.models).toEqual([q4, q8]);
    expect((await listModels({ modelsDir: dir })).map((m) => m.reference)).toEqual(['acme/Demo-GGUF:Q4_K_M', 'acme/Demo-GGUF:Q8_0']);

    const removed = await removeModel('acme/Demo-GGUF:q4_k_m', { modelsDir: dir });
    expect(removed.map((m) => m.reference)).toEqual(['acme/Demo-GGUF:Q4_K_M']);
    // the projector stays: the Q8_0 entry still uses it
    expect(filesUnder(dir)).toEqual(['hf/acme/Demo-GGUF/Demo-Q8_0.gguf', 'hf/acme/Demo-GGUF/mmproj-Demo-F16.gguf', 'manifest.json']);
    const missing = await rejection(removeModel('acme/Demo-GGUF:Q4_K_M', { modelsDir: dir }));
    expect(missing.code).toBe('MODEL_NOT_FOUND');
    expect(missing.message).toBe('No pulled model matches "acme/Demo-GGUF:Q4_K_M"; pulled: acme/Demo-GGUF:Q8_0');
    await removeModel('acme/Demo-GGUF', { modelsDir: dir });
    expect(filesUnder(dir)).toEqual(['manifest.json']);
    expect(await listModels({ modelsDir: dir })).toEqual([]);
  });

  it('a manifest that does not parse counts as empty, and the next pull rewrites it', async () => {
    const dir = tempDir('pull-badmanifest');
    await pull('acme/Demo-GGUF:Q8_0', opts(dir));
    const { writeFileSync } = await import('node:fs');
    writeFileSync(join(dir, 'manifest.json'), '{"version":1,"models":[{"refer');
    expect(await listModels({ modelsDir: dir })).toEqual([]);
    hub.requests.length = 0;
    const m = await pull('acme/Demo-GGUF:Q8_0', opts(dir));
    expect(cdnGets(hub)).toEqual([]); // the file on disk hashes to the hub's sha256: kept
    expect(await listModels({ modelsDir: dir })).toEqual([m]);
  });
});
