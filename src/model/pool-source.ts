// Where a ModelPool's models come from: a folder of GGUF files or a config (a JSON file or an
// object), resolved once into named entries with absolute paths.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import { LlamuxError } from '../errors.js';
import { formatIssues } from '../issues.js';
import type { ContextOptions, LoadModelOptions } from '../options.js';

/** One model of a pool's config. */
export interface ModelPoolEntry {
  /** The GGUF file (the first shard of a split model); relative paths start at the config file's folder. */
  path: string;
  /** Never unloaded by the pool (LRU, idle, memory); only an explicit `unload()` frees it. */
  pinned?: boolean;
  /** Options of loadModel for this model (over the pool's `loadOptions`). */
  loadOptions?: Omit<LoadModelOptions, 'onProgress' | 'signal'>;
  /** Options of its context (over the pool's `contextOptions`). */
  contextOptions?: ContextOptions;
  /** A Jinja chat template replacing the model's own (used by the server's router). */
  chatTemplate?: string;
}

/** A model the pool knows, resolved. */
export interface ResolvedEntry {
  readonly name: string;
  /** Absolute path of the file given to loadModel (the first shard of a split model). */
  readonly path: string;
  /** Every file of the model (one, or each shard of a split model). */
  readonly files: readonly string[];
  readonly pinned: boolean;
  readonly loadOptions: Omit<LoadModelOptions, 'onProgress' | 'signal'>;
  readonly contextOptions: ContextOptions;
  readonly chatTemplate?: string;
}

const EntrySchema = z
  .object({
    path: z.string().min(1),
    pinned: z.boolean().optional(),
    // Checked by loadModel and createContext themselves when the model loads.
    loadOptions: z.record(z.string(), z.unknown()).optional(),
    contextOptions: z.record(z.string(), z.unknown()).optional(),
    chatTemplate: z.string().min(1).optional(),
  })
  .strict();
const ConfigSchema = z.record(z.string().min(1).max(256), EntrySchema);

const SPLIT_RE = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/i;

/** The files of a split model given its first shard, or just the path. */
export function modelFiles(path: string): string[] {
  const m = SPLIT_RE.exec(basename(path));
  if (!m || Number(m[2]) !== 1) return [path];
  const total = Number(m[3]);
  return Array.from({ length: total }, (_, i) => join(dirname(path), `${m[1]}-${String(i + 1).padStart(5, '0')}-of-${m[3]}.gguf`));
}

function isGguf(name: string): boolean {
  // Projector files sit beside the model they serve; they are not models of their own.
  return name.toLowerCase().endsWith('.gguf') && !name.toLowerCase().startsWith('mmproj');
}

/** The models of a list of GGUF file names in one folder: name (stem) → first file. */
function modelsIn(dir: string, names: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const f of [...names].filter(isGguf).sort()) {
    const m = SPLIT_RE.exec(f);
    if (m) {
      if (Number(m[2]) === 1) out.set(m[1]!, join(dir, f));
    } else out.set(f.replace(/\.gguf$/i, ''), join(dir, f));
  }
  return out;
}

/**
 * A folder's models: each `*.gguf` (split files `-0000N-of-0000M` as one model, `mmproj*`
 * skipped), named by its stem; and each subfolder holding one model, named by the subfolder
 * (several models in a subfolder: `subfolder/stem`).
 */
function scanFolder(dir: string): ResolvedEntry[] {
  const entries = readdirSync(dir, { withFileTypes: true });
  const found = new Map<string, string>();
  const add = (name: string, path: string): void => {
    if (found.has(name)) throw new LlamuxError('INVALID_ARGUMENT', `Two models in "${dir}" are named "${name}" (${found.get(name)} and ${path}); rename one`);
    found.set(name, path);
  };
  for (const [name, path] of modelsIn(dir, entries.filter((e) => e.isFile()).map((e) => e.name))) add(name, path);
  for (const sub of entries.filter((e) => e.isDirectory()).sort((a, b) => a.name.localeCompare(b.name))) {
    const subDir = join(dir, sub.name);
    let files: string[];
    try {
      files = readdirSync(subDir, { withFileTypes: true }).filter((e) => e.isFile()).map((e) => e.name);
    } catch {
      continue; // unreadable: not a model folder
    }
    const inSub = modelsIn(subDir, files);
    if (inSub.size === 1) add(sub.name, [...inSub.values()][0]!);
    else for (const [name, path] of inSub) add(`${sub.name}/${name}`, path);
  }
  return [...found].map(([name, path]) => ({ name, path, files: modelFiles(path), pinned: false, loadOptions: {}, contextOptions: {} }));
}

function fromConfig(config: unknown, base: string, what: string): ResolvedEntry[] {
  const r = ConfigSchema.safeParse(config);
  if (!r.success) throw new LlamuxError('INVALID_ARGUMENT', `Invalid ${what}: ${formatIssues(r.error.issues, { kind: 'option', input: config, what })}`, { issues: r.error.issues });
  return Object.entries(r.data).map(([name, e]) => {
    const path = resolve(base, e.path);
    return {
      name,
      path,
      files: modelFiles(path),
      pinned: e.pinned ?? false,
      loadOptions: (e.loadOptions ?? {}) as ResolvedEntry['loadOptions'],
      contextOptions: (e.contextOptions ?? {}) as ContextOptions,
      ...(e.chatTemplate !== undefined ? { chatTemplate: e.chatTemplate } : {}),
    };
  });
}

/**
 * The models of a pool: a folder, a JSON config file (name → entry, paths relative to the
 * file's folder) or a config object (paths relative to the working directory).
 * @throws LlamuxError INVALID_ARGUMENT (no models, a bad config), MODEL_NOT_FOUND (no such folder or file)
 */
export function resolvePoolSource(source: string | Record<string, ModelPoolEntry>): ResolvedEntry[] {
  let entries: ResolvedEntry[];
  if (typeof source === 'string') {
    const full = resolve(source);
    let info;
    try {
      info = statSync(full);
    } catch (e) {
      throw new LlamuxError('MODEL_NOT_FOUND', `No models folder or config file at "${full}"`, { cause: e });
    }
    if (info.isDirectory()) entries = scanFolder(full);
    else {
      let config: unknown;
      try {
        config = JSON.parse(readFileSync(full, 'utf8'));
      } catch (e) {
        throw new LlamuxError('INVALID_ARGUMENT', `The models config "${full}" is not a JSON file: ${(e as Error).message}`, { cause: e });
      }
      entries = fromConfig(config, dirname(full), `models config "${full}"`);
    }
    if (entries.length === 0) throw new LlamuxError('INVALID_ARGUMENT', `"${full}" holds no models (${info.isDirectory() ? 'no .gguf files' : 'an empty config'})`);
  } else {
    entries = fromConfig(source, process.cwd(), 'models config');
    if (entries.length === 0) throw new LlamuxError('INVALID_ARGUMENT', 'The models config names no models');
  }
  return entries;
}
