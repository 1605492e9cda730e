// File-system fault injection for the hardening tests: a tiny tmpfs that can be filled (ENOSPC)
// or remounted read-only (EROFS). Needs root (CAP_SYS_ADMIN); without it the folder is a plain
// directory and `fill()` / `readOnly()` fall back to `chmod 0500` (effective for non-root users
// only). `faulty()` probes whether writes really fail, so a test can tell an injected fault from
// a fallback that could not inject one.
import { execFileSync } from 'node:child_process';
import { chmodSync, closeSync, openSync, readdirSync, readlinkSync, rmSync, statSync, truncateSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers/paths.js';

export interface FaultyFs {
  /** The mount point (or plain folder). */
  readonly dir: string;
  /** Whether a tmpfs is mounted at `dir` (else the chmod fallback is used). */
  readonly tmpfs: boolean;
  /** Fills the file system until ENOSPC, leaving about `leaveBytes` free (tmpfs pages are 4 KiB). */
  fill(leaveBytes?: number): void;
  /** Deletes what fill() wrote. */
  free(): void;
  /** Remounts read-only (EROFS for every write, even root's). */
  readOnly(): void;
  /** Remounts read-write. */
  readWrite(): void;
  /** Whether a 4 KiB write into `dir` fails now (the injected fault is in effect). */
  faulty(): boolean;
  /** Files under `dir` that this process holds open. */
  openFiles(): string[];
  /** Unmounts (lazily if busy) and removes the folder. Idempotent. */
  dispose(): void;
}

function run(cmd: string, args: string[]): boolean {
  try {
    execFileSync(cmd, args, { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

/** A `sizeKb` KiB tmpfs at a fresh folder (see the file comment for the fallback). */
export function faultyFs(name: string, sizeKb: number): FaultyFs {
  const dir = tempDir(name);
  const tmpfs = run('mount', ['-t', 'tmpfs', '-o', `size=${sizeKb}k,mode=0755`, 'tmpfs', dir]);
  const fillers: string[] = [];
  let disposed = false;
  const fs: FaultyFs = {
    dir,
    tmpfs,
    fill(leaveBytes = 0) {
      if (!tmpfs) {
        chmodSync(dir, 0o500);
        return;
      }
      const file = join(dir, `filler-${fillers.length}`);
      fillers.push(file);
      const fd = openSync(file, 'w');
      const page = Buffer.alloc(4096, 0x5a);
      try {
        for (;;) writeSync(fd, page);
      } catch {
        // ENOSPC: full
      } finally {
        closeSync(fd);
      }
      if (leaveBytes > 0) {
        // Give some space back by truncating the filler.
        truncateSync(file, Math.max(0, statSync(file).size - leaveBytes));
      }
    },
    free() {
      if (!tmpfs) {
        chmodSync(dir, 0o755);
        return;
      }
      for (const f of fillers.splice(0)) rmSync(f, { force: true });
    },
    readOnly() {
      if (!tmpfs || !run('mount', ['-o', 'remount,ro', dir])) chmodSync(dir, 0o500);
    },
    readWrite() {
      if (tmpfs) run('mount', ['-o', 'remount,rw', dir]);
      chmodSync(dir, 0o755);
    },
    faulty() {
      const probe = join(dir, `.probe-${process.pid}`);
      try {
        const fd = openSync(probe, 'w');
        try {
          writeSync(fd, Buffer.alloc(4096));
        } finally {
          closeSync(fd);
          try {
            unlinkSync(probe);
          } catch {
            // read-only: nothing was created
          }
        }
        return false;
      } catch {
        return true;
      }
    },
    openFiles() {
      const out: string[] = [];
      for (const fd of readdirSync('/proc/self/fd')) {
        try {
          const target = readlinkSync(`/proc/self/fd/${fd}`);
          if (target.startsWith(`${dir}/`)) out.push(target);
        } catch {
          // closed meanwhile
        }
      }
      return out;
    },
    dispose() {
      if (disposed) return;
      disposed = true;
      if (tmpfs && !run('umount', [dir])) run('umount', ['-l', dir]);
      try {
        chmodSync(dir, 0o755);
      } catch {
        // already gone
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return fs;
}

/** Every file below `dir` (recursively), as paths. */
export function filesBelow(dir: string): string[] {
  const out: string[] = [];
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...filesBelow(p));
    else out.push(p);
  }
  return out;
}
