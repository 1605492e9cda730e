// The models folder's manifest (`manifest.json`): what pull() fetched, file by file. Written
// to a temporary name and renamed; read-modify-write under a lock file holding the writer's
// pid, so two processes pulling into one folder do not lose each other's entries. A manifest
// that does not parse counts as empty (the files stay; the next pull re-verifies them).
import { open, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { abortError } from '../errors.js';
import { HubError } from './errors.js';

export interface PulledFile {
  /** What the file is to the model: the model itself (part of it, when split), its vision projector, a draft/MTP model. */
  role: 'model' | 'mmproj' | 'draft';
  /** The repository path, or the URL for a URL pull. */
  file: string;
  /** Absolute path on disk. */
  path: string;
  size: number;
  sha256: string;
}

export interface PulledModel {
  /** Canonical reference: `org/repo:Q4_K_M`, `org/repo/file.gguf` or the URL. */
  reference: string;
  /** `org/repo`, or the URL's file name. */
  name: string;
  /** The quant tag, when the file name has one. */
  quant: string | null;
  source: { type: 'hf'; endpoint: string; repo: string; revision: string; commit: string | null } | { type: 'url'; url: string };
  /** The model file to load (the first part of a split GGUF). */
  path: string;
  /** Every file's bytes together. */
  size: number;
  files: PulledFile[];
  /** ISO time of the pull. */
  pulledAt: string;
}

interface ManifestFile {
  version: 1;
  models: PulledModel[];
}

export const MANIFEST_NAME = 'manifest.json';

export async function readManifest(dir: string): Promise<PulledModel[]> {
  try {
    const m = JSON.parse(await readFile(join(dir, MANIFEST_NAME), 'utf8')) as ManifestFile;
    return m?.version === 1 && Array.isArray(m.models) ? m.models.filter((e) => typeof e?.reference === 'string' && Array.isArray(e.files)) : [];
  } catch {
    return [];
  }
}

async function writeManifest(dir: string, models: PulledModel[]): Promise<void> {
  const tmp = join(dir, `.${MANIFEST_NAME}.${process.pid}.${Date.now()}.tmp`);
  try {
    await writeFile(tmp, `${JSON.stringify({ version: 1, models } satisfies ManifestFile, null, 2)}\n`);
    await rename(tmp, join(dir, MANIFEST_NAME));
  } catch (e) {
    await unlink(tmp).catch(() => {});
    if ((e as NodeJS.ErrnoException).code === 'ENOSPC') throw new HubError('DISK_FULL', `Disk full while writing ${join(dir, MANIFEST_NAME)}`, { cause: e });
    throw e;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Holds `<path>` (created exclusively, the pid inside) while `fn` runs. A lock whose process is
 * gone is taken over; a live one is waited for, polling every 50 ms.
 */
// Locks this process holds: a lock file with our pid that is not in here was left by an earlier
// process that had the same pid (containers restart with the same low pids).
const held = new Set<string>();

export async function withLockFile<T>(path: string, fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  for (;;) {
    if (signal?.aborted) throw abortError(signal, 'The pull');
    try {
      const fh = await open(path, 'wx');
      held.add(path);
      await fh.writeFile(String(process.pid));
      await fh.close();
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const pid = Number(await readFile(path, 'utf8').catch(() => ''));
      // An empty file is a lock being written this instant: wait for it like a live one.
      const stale = pid === process.pid ? !held.has(path) : !alive(pid);
      if (Number.isInteger(pid) && pid > 0 && stale) {
        await unlink(path).catch(() => {});
        continue;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  try {
    return await fn();
  } finally {
    held.delete(path);
    await unlink(path).catch(() => {});
  }
}

/** Read, change and write the manifest under its lock. */
export function updateManifest<T>(dir: string, change: (models: PulledModel[]) => { models: PulledModel[]; result: T }): Promise<T> {
  return withLockFile(join(dir, `${MANIFEST_NAME}.lock`), async () => {
    const { models, result } = change(await readManifest(dir));
    await writeManifest(dir, models);
    return result;
  });
}
