// One file onto disk: into `<dest>.partial` (its ETag, size and sha256 beside it in
// `<dest>.partial.json`), resumed with a Range request after an interruption, sha256 checked,
// then renamed to `<dest>`. Nothing at `<dest>` is ever partial or unverified.
import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, readFile, rename, stat, statfs, unlink, writeFile, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { abortError } from '../errors.js';
import { HubError } from './errors.js';
import type { HubClient } from './hub-client.js';

export interface DownloadTarget {
  /** Shown in errors and progress: the repository path or the URL. */
  name: string;
  url: string;
  /** Expected size, when known. */
  size?: number | undefined;
  /** Expected sha256 (hex), when known; otherwise the computed one is only reported. */
  sha256?: string | undefined;
}

export interface DownloadOptions {
  /** Called as bytes land (throttled by the caller if it wants). */
  onBytes?: (done: number, total: number | undefined) => void;
  /** No byte for this long → the connection counts as dropped and is retried (default 60 s). */
  stallTimeoutMs: number;
  /** Opens the partial file; fs.promises.open unless a test injects a failing one. */
  openFile?: (path: string, flags: string) => Promise<FileHandle>;
}

interface PartialMeta {
  url: string;
  etag?: string;
  size?: number;
  sha256?: string;
}

const WRITE_CHUNK = 1 << 20;

const normEtag = (e: string | null | undefined): string | undefined => (e ? e.replace(/^W\//, '') : undefined);

function isDiskFull(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}

async function hashFile(path: string, hash: Hash, signal?: AbortSignal): Promise<void> {
  for await (const chunk of createReadStream(path, signal ? { signal } : {})) hash.update(chunk as Buffer);
}

async function readMeta(path: string): Promise<PartialMeta | undefined> {
  try {
    const m = JSON.parse(await readFile(path, 'utf8')) as PartialMeta;
    return typeof m === 'object' && m !== null && typeof m.url === 'string' ? m : undefined;
  } catch {
    return undefined;
  }
}

/** Free bytes at `dir`, or undefined where statfs is unavailable. */
async function freeBytes(dir: string): Promise<number | undefined> {
  try {
    const s = await statfs(dir);
    return s.bavail * s.bsize;
  } catch {
    return undefined;
  }
}

/**
 * Downloads `target` to `dest`: resumes `<dest>.partial` when its record matches the file
 * (same sha256, or same ETag when there is none) and the server answers 206 with that ETag;
 * starts over otherwise. Throws CHECKSUM_MISMATCH (partial removed), DISK_FULL (partial kept
 * for a later resume), DOWNLOAD_* from the client, ABORTED (partial kept).
 */
export async function downloadFile(client: HubClient, target: DownloadTarget, dest: string, opts: DownloadOptions): Promise<{ size: number; sha256: string; etag?: string }> {
  const partial = `${dest}.partial`;
  const metaPath = `${dest}.partial.json`;
  const signal = client.signal;
  await mkdir(dirname(dest), { recursive: true });

  // What is already there, if it is the same file.
  let offset = 0;
  let meta = await readMeta(metaPath);
  const size = await stat(partial).then((s) => s.size, () => -1);
  const sameFile = meta !== undefined && (target.sha256 !== undefined ? meta.sha256 === target.sha256 : meta.etag !== undefined && meta.url === target.url);
  if (size >= 0 && sameFile && (target.size === undefined || size <= target.size)) offset = size;
  else {
    meta = undefined;
    await unlink(partial).catch(() => {});
  }
  if (meta === undefined) {
    meta = { url: target.url, ...(target.size !== undefined ? { size: target.size } : {}), ...(target.sha256 ? { sha256: target.sha256 } : {}) };
    await writeFile(metaPath, JSON.stringify(meta));
  }
  if (target.size !== undefined) {
    const free = await freeBytes(dirname(dest));
    if (free !== undefined && free < target.size - offset) {
      throw new HubError('DISK_FULL', `Not enough disk space for ${target.name}: ${target.size - offset} bytes needed, ${free} free in ${dirname(dest)}`);
    }
  }

  // The hash covers exactly the bytes in the partial file, written and hashed together.
  let hash = createHash('sha256');
  if (offset > 0) {
    try {
      await hashFile(partial, hash, signal);
    } catch (e) {
      throw signal?.aborted ? abortError(signal, 'The pull') : e;
    }
  }
  const fh = await (opts.openFile ?? open)(partial, offset > 0 ? 'r+' : 'w');
  let written = offset;
  let etag: string | undefined = meta.etag;
  const restart = async (): Promise<void> => {
    await fh.truncate(0);
    written = 0;
    hash = createHash('sha256');
  };

  try {
    await client.withRetries(`Downloading ${target.name}`, async (_attempt, progressed) => {
      const stall = new AbortController();
      const reqSignal = signal ? AbortSignal.any([signal, stall.signal]) : stall.signal;
      let timer = setTimeout(() => stall.abort(new Error(`no data for ${opts.stallTimeoutMs} ms`)), opts.stallTimeoutMs);
      const kick = (): void => {
        clearTimeout(timer);
        timer = setTimeout(() => stall.abort(new Error(`no data for ${opts.stallTimeoutMs} ms`)), opts.stallTimeoutMs);
      };
      try {
        const headers: Record<string, string> = written > 0 ? { range: `bytes=${written}-` } : {};
        let res = await client.request(target.url, { headers, signal: reqSignal });
        if (written > 0) {
          const range = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.headers.get('content-range') ?? '');
          const resEtag = normEtag(res.headers.get('etag'));
          if (res.status === 416) {
            await res.body?.cancel().catch(() => {});
            if (target.size !== undefined && written === target.size) return; // already complete
            await restart();
            res = await client.request(target.url, { signal: reqSignal });
          } else if (res.status === 206 && (!range || Number(range[1]) !== written || (etag !== undefined && resEtag !== undefined && resEtag !== etag))) {
            // Another version of the file, or a range we did not ask for: start over.
            await res.body?.cancel().catch(() => {});
            await restart();
            res = await client.request(target.url, { signal: reqSignal });
          } else if (res.status !== 206) {
            await restart(); // the server ignored Range: its 200 is the whole file
          }
        }
        if (res.status === 416) throw new HubError('DOWNLOAD_FAILED', `HTTP 416 for a request without Range from ${target.url}`, { url: target.url, status: 416 });
        const resEtag = normEtag(res.headers.get('etag'));
        if (resEtag !== etag) {
          etag = resEtag;
          meta = { ...meta!, ...(etag !== undefined ? { etag } : {}) };
          await writeFile(metaPath, JSON.stringify(meta));
        }
        const total = target.size ?? (res.status === 200 ? Number(res.headers.get('content-length')) || undefined : undefined);
        if (!res.body) throw new Error('empty response body');
        const pending: Buffer[] = [];
        let pendingBytes = 0;
        const flush = async (): Promise<void> => {
          if (pendingBytes === 0) return;
          const buf = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes);
          pending.length = 0;
          pendingBytes = 0;
          let off = 0;
          let failed: unknown;
          try {
            while (off < buf.length) {
              const { bytesWritten } = await fh.write(buf, off, buf.length - off, written + off);
              off += bytesWritten;
            }
          } catch (e) {
            failed = e;
          }
          // What reached the file is hashed, and nothing else is in it: a resume continues there.
          hash.update(buf.subarray(0, off));
          written += off;
          if (failed !== undefined) {
            await fh.truncate(written).catch(() => {});
            // A LlamuxError: the disk is not the network, retrying would not help.
            if (isDiskFull(failed)) {
              throw new HubError('DISK_FULL', `Disk full while writing ${target.name} to ${partial} (${written} bytes kept; free space and pull again to resume)`, { cause: failed });
            }
            throw new HubError('DOWNLOAD_FAILED', `Cannot write ${partial}: ${(failed as Error).message}`, { cause: failed });
          }
          progressed();
        };
        try {
          for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
            kick();
            pending.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
            pendingBytes += chunk.byteLength;
            // Progress counts bytes received; they reach the file in 1 MiB writes (and at the end, on any error or abort).
            opts.onBytes?.(written + pendingBytes, total);
            if (pendingBytes >= WRITE_CHUNK) await flush();
          }
        } finally {
          await flush();
        }
        if (target.size !== undefined && written < target.size) throw new Error(`the connection closed after ${written} of ${target.size} bytes`);
      } finally {
        clearTimeout(timer);
      }
    });
  } catch (e) {
    await fh.close().catch(() => {});
    if (signal?.aborted) throw abortError(signal, 'The pull');
    throw e;
  }

  const sha256 = hash.digest('hex');
  try {
    if (target.size !== undefined && written !== target.size) {
      throw new HubError('CHECKSUM_MISMATCH', `${target.name}: received ${written} bytes, the hub lists ${target.size}`, { url: target.url });
    }
    if (target.sha256 !== undefined && sha256 !== target.sha256) {
      throw new HubError('CHECKSUM_MISMATCH', `${target.name}: sha256 ${sha256} does not match the hub's ${target.sha256}; the download was removed`, { url: target.url });
    }
    await fh.sync();
  } catch (e) {
    await fh.close().catch(() => {});
    await unlink(partial).catch(() => {});
    await unlink(metaPath).catch(() => {});
    throw e;
  }
  await fh.close();
  await rename(partial, dest);
  await unlink(metaPath).catch(() => {});
  return { size: written, sha256, ...(etag !== undefined ? { etag } : {}) };
}

/** Whether `path` holds exactly this file: its size, and its sha256 when one is expected. */
export async function alreadyThere(path: string, expect: { size?: number | undefined; sha256?: string | undefined; knownSha256?: string | undefined }): Promise<boolean> {
  const s = await stat(path).catch(() => undefined);
  if (!s?.isFile() || (expect.size !== undefined && s.size !== expect.size)) return false;
  if (expect.sha256 === undefined) return expect.knownSha256 !== undefined;
  if (expect.knownSha256 === expect.sha256) return true;
  const h = createHash('sha256');
  await hashFile(path, h);
  return h.digest('hex') === expect.sha256;
}
