// pull(), listModels(), removeModel(): a model reference to verified files in the models
// folder, recorded in its manifest.
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { mkdir, readdir, rmdir, stat, unlink } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { z } from 'zod';
import { LlamuxError } from '../errors.js';
import { parseOptions } from '../options.js';
import { alreadyThere, downloadFile } from './download.js';
import { HubError } from './errors.js';
import { HubClient, type RemoteEntry } from './hub-client.js';
import { readManifest, updateManifest, withLockFile, type PulledFile, type PulledModel } from './manifest.js';
import {
  DEFAULT_QUANTS,
  isDraft,
  isMmproj,
  parseModelReference,
  pickMmproj,
  quantTagOf,
  resolveQuant,
  safeRelativePath,
  splitPart,
  splitParts,
  type ModelReference,
} from './reference.js';

export const DEFAULT_HF_ENDPOINT = 'https://huggingface.co';

/** Progress of one file of a pull. */
export interface PullProgress {
  /** The repository path (or URL) of the file. */
  file: string;
  /** 0-based index of the file among `count`. */
  index: number;
  count: number;
  /** Bytes of this file on disk so far, and its size when known. */
  done: number;
  total: number | undefined;
  /** All files together (sizes from the hub's listing; undefined when one is unknown). */
  overallDone: number;
  overallTotal: number | undefined;
  /** True for a file already present and verified (no transfer). */
  cached: boolean;
}

const httpUrl = z.string().refine((s) => /^https?:\/\/[^/]/i.test(s), { message: 'expected an http(s) URL' });

const ModelsDirOptionsSchema = z.object({ modelsDir: z.string().min(1).optional() }).strict();

export const PullOptionsSchema = z
  .object({
    /** The models folder (default $LLAMUX_MODELS_DIR, else ~/.cache/llamux/models). */
    modelsDir: z.string().min(1).optional(),
    /** The hub's base URL (default $LLAMUX_HF_ENDPOINT, else https://huggingface.co). */
    endpoint: httpUrl.optional(),
    /** Bearer token for the hub (default $HF_TOKEN); sent to the hub's origin only. */
    token: z.string().optional(),
    /** Branch, tag or commit (default main). */
    revision: z.string().min(1).max(256).optional(),
    /** Also pull the repository's vision projector (mmproj*.gguf): true picks one (F16 first), a string names the file. Default false. */
    mmproj: z.union([z.boolean(), z.string().min(1)]).optional(),
    /** Also pull a draft / MTP model of the same repository (*-mtp-*.gguf, *-draft*.gguf): true picks one, a string names the file. Default false. */
    draft: z.union([z.boolean(), z.string().min(1)]).optional(),
    /** Expected sha256 of a URL pull (hub pulls take it from the hub). */
    sha256: z.string().regex(/^[0-9a-fA-F]{64}$/, 'expected 64 hex digits').optional(),
    /** Download again even when the files are present and verified. */
    force: z.boolean().optional(),
    /** Retries after a network error, 429 or 5xx (default 5). */
    retries: z.number().int().min(0).max(100).optional(),
    /** First backoff delay in ms, doubling per retry (default 500). */
    retryDelayMs: z.number().int().min(0).max(600_000).optional(),
    /** A transfer with no byte for this long is dropped and resumed (default 60000). */
    stallTimeoutMs: z.number().int().min(1).optional(),
    signal: z.custom<AbortSignal>((v) => v instanceof AbortSignal, { message: 'expected an AbortSignal' }).optional(),
    onProgress: z.custom<(p: PullProgress) => void>((v) => typeof v === 'function', { message: 'expected a function' }).optional(),
    /** Opens the partial files (fs.promises.open by default): for tests and custom storage. */
    openFile: z.custom<(path: string, flags: string) => Promise<FileHandle>>((v) => typeof v === 'function', { message: 'expected a function' }).optional(),
  })
  .strict();

export type PullOptions = z.input<typeof PullOptionsSchema>;
export type ModelsDirOptions = z.input<typeof ModelsDirOptionsSchema>;

/** The models folder: the option, else $LLAMUX_MODELS_DIR, else ~/.cache/llamux/models. */
export function modelsDirectory(option?: string): string {
  const env = process.env.LLAMUX_MODELS_DIR;
  return resolve(option ?? (env !== undefined && env !== '' ? env : join(homedir(), '.cache', 'llamux', 'models')));
}

function hubEndpoint(option?: string): string {
  const env = process.env.LLAMUX_HF_ENDPOINT;
  if (option === undefined && env !== undefined && env !== '' && !httpUrl.safeParse(env).success) {
    throw new LlamuxError('INVALID_ARGUMENT', `LLAMUX_HF_ENDPOINT must be an http(s) URL, not ${JSON.stringify(env)}`);
  }
  return (option ?? (env !== undefined && env !== '' ? env : DEFAULT_HF_ENDPOINT)).replace(/\/+$/, '');
}

/** File-system failures as typed errors: a full disk, a models folder that cannot be written. */
function typedFsError(e: unknown, dir: string): unknown {
  if (e instanceof LlamuxError) return e;
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new HubError('DISK_FULL', `Disk full in ${dir}: ${(e as Error).message}`, { cause: e });
  if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS' || code === 'ENOTDIR' || code === 'EEXIST' || code === 'EISDIR') {
    return new LlamuxError('INVALID_ARGUMENT', `Cannot write the models folder ${dir}: ${(e as Error).message}`, { cause: e });
  }
  return e;
}

/** `dir/rel` when it stays inside `dir` (belt and braces after safeRelativePath). */
function inside(dir: string, rel: string): string {
  const p = resolve(dir, rel);
  const r = relative(dir, p);
  if (r === '' || r.startsWith('..') || isAbsolute(r)) throw new LlamuxError('INVALID_ARGUMENT', `Refusing file name ${JSON.stringify(rel)}: it leaves the models folder`);
  return p;
}

interface Planned {
  role: PulledFile['role'];
  file: string;
  url: string;
  dest: string;
  size?: number | undefined;
  sha256?: string | undefined;
}

interface Plan {
  reference: string;
  name: string;
  quant: string | null;
  source: PulledModel['source'];
  files: Planned[];
}

function pickCompanion(repo: string, paths: string[], want: boolean | string | undefined, role: 'mmproj' | 'draft'): string | undefined {
  if (want === undefined || want === false) return undefined;
  const of = role === 'mmproj' ? isMmproj : isDraft;
  const all = paths.filter(of);
  const hit = want === true ? (role === 'mmproj' ? pickMmproj(paths) : all.sort()[0]) : paths.includes(want) ? want : undefined;
  if (hit === undefined) {
    const what = role === 'mmproj' ? 'vision projector (mmproj*.gguf)' : 'draft or MTP model (*-mtp-*.gguf, *-draft*.gguf)';
    throw new HubError('MODEL_NOT_FOUND', `${repo} has no ${want === true ? what : `file ${JSON.stringify(want)}`}${all.length ? `; available: ${all.join(', ')}` : ''}`, { available: all });
  }
  return safeRelativePath(hit);
}

async function planHub(client: HubClient, ref: Extract<ModelReference, { kind: 'hf' }>, revision: string, dir: string, o: z.output<typeof PullOptionsSchema>): Promise<Plan> {
  const entries = await client.listFiles(ref.repo, revision);
  const byPath = new Map<string, RemoteEntry>(entries.map((e) => [e.path, e]));
  const paths = [...byPath.keys()];
  let modelFiles: string[];
  let quant: string | null;
  let reference: string;
  if (ref.file !== undefined) {
    if (!byPath.has(ref.file)) {
      const ggufs = paths.filter((p) => /\.gguf$/i.test(p)).sort();
      throw new HubError('MODEL_NOT_FOUND', `${ref.repo} has no file ${ref.file}${ggufs.length ? `; its GGUF files: ${ggufs.join(', ')}` : ''}`, { available: ggufs });
    }
    const sp = splitPart(ref.file);
    const first = sp ? ref.file.replace(/-\d{5}-of-(\d{5})(?=\.gguf$)/i, (_m, n: string) => `-${'1'.padStart(5, '0')}-of-${n}`) : ref.file;
    modelFiles = splitParts(ref.repo, first, paths);
    quant = quantTagOf(first) ?? null;
    reference = `${ref.repo}/${first}`;
  } else {
    const group = resolveQuant(ref.repo, paths, ref.tag);
    modelFiles = splitParts(ref.repo, group.files[0]!, paths);
    quant = group.tag ?? null;
    reference = quant !== null ? `${ref.repo}:${quant}` : `${ref.repo}/${modelFiles[0]}`;
  }
  const files: Array<{ role: PulledFile['role']; file: string }> = modelFiles.map((file) => ({ role: 'model', file: safeRelativePath(file) }));
  const mm = pickCompanion(ref.repo, paths, o.mmproj, 'mmproj');
  if (mm !== undefined) files.push({ role: 'mmproj', file: mm });
  const dr = pickCompanion(ref.repo, paths, o.draft, 'draft');
  if (dr !== undefined) files.push({ role: 'draft', file: dr });
  const repoDir = join(dir, 'hf', ...ref.repo.split('/'));
  return {
    reference,
    name: ref.repo,
    quant,
    source: { type: 'hf', endpoint: client.endpoint, repo: ref.repo, revision, commit: null },
    files: files.map(({ role, file }) => {
      const e = byPath.get(file)!;
      return { role, file, url: client.resolveUrl(ref.repo, revision, file), dest: inside(repoDir, file), size: e.size, sha256: e.sha256 };
    }),
  };
}

async function planUrl(client: HubClient, url: string, dir: string, o: z.output<typeof PullOptionsSchema>): Promise<Plan> {
  const u = new URL(url);
  const base = safeRelativePath(decodeURIComponent(u.pathname.split('/').pop()!), 'URL file name');
  // The server's HEAD may give the size and (a hub mirror's X-Linked-Etag) the sha256.
  let head: { sha256?: string; size?: number } = {};
  try {
    head = await client.headFile(url);
  } catch (e) {
    // A server without HEAD is fine (the GET tells the size); a refusal or a 404 is not.
    if (e instanceof LlamuxError && (e.code === 'DOWNLOAD_UNAUTHORIZED' || e.code === 'MODEL_NOT_FOUND' || e.code === 'ABORTED')) throw e;
  }
  const host = u.port ? `${u.hostname}_${u.port}` : u.hostname;
  return {
    reference: url,
    name: base,
    quant: quantTagOf(base) ?? null,
    source: { type: 'url', url },
    files: [{ role: 'model', file: url, url, dest: inside(join(dir, 'url'), `${host}/${base}`), size: head.size, sha256: o.sha256?.toLowerCase() ?? head.sha256 }],
  };
}

/**
 * Downloads a model into the models folder (once: files present with the hub's sha256 are
 * kept) and records it in the manifest. Returns the manifest entry; `path` is the file to
 * load (the first part of a split GGUF).
 *
 * @throws LlamuxError INVALID_ARGUMENT (reference, options, an unsafe file name),
 *   MODEL_NOT_FOUND (repository, file or quant tag: `available` lists the tags), DOWNLOAD_UNAUTHORIZED
 *   (401/403), DOWNLOAD_FAILED (retries spent), CHECKSUM_MISMATCH, DISK_FULL, ABORTED
 * @example
 * const m = await pull('Qwen/Qwen3-0.6B-GGUF:Q8_0', { onProgress: (p) => console.log(p.file, p.done, p.total) });
 * const model = await loadModel(m.path);
 */
export async function pull(reference: string, options?: PullOptions): Promise<PulledModel> {
  const o = parseOptions(PullOptionsSchema, options, 'pull() options');
  const dir = modelsDirectory(o.modelsDir);
  try {
    return await pullInto(dir, reference, o);
  } catch (e) {
    throw typedFsError(e, dir);
  }
}

async function pullInto(dir: string, reference: string, o: z.output<typeof PullOptionsSchema>): Promise<PulledModel> {
  const endpointOpt = hubEndpoint(o.endpoint);
  const ref = parseModelReference(reference, endpointOpt);
  const token = o.token ?? process.env.HF_TOKEN;
  const client = new HubClient({
    endpoint: ref.kind === 'hf' && ref.endpoint ? ref.endpoint : endpointOpt,
    token: token === '' ? undefined : token,
    retries: o.retries ?? 5,
    retryDelayMs: o.retryDelayMs ?? 500,
    signal: o.signal,
  });
  await mkdir(dir, { recursive: true });
  const plan = ref.kind === 'hf' ? await planHub(client, ref, ref.revision ?? o.revision ?? 'main', dir, o) : await planUrl(client, ref.url, dir, o);

  // Files the hub listed without a sha256: the resolve HEAD's X-Linked-Etag has it.
  for (const f of plan.files) {
    if (f.sha256 === undefined && plan.source.type === 'hf') {
      const h = await client.headFile(f.url);
      f.sha256 = h.sha256;
      f.size ??= h.size;
      if (h.commit && plan.source.commit === null) plan.source.commit = h.commit;
    }
  }

  const known = new Map((await readManifest(dir)).flatMap((m) => m.files.map((f) => [f.path, f.sha256] as const)));
  const sizes = plan.files.map((f) => f.size);
  const overallTotal = sizes.every((s) => s !== undefined) ? sizes.reduce<number>((a, s) => a + s!, 0) : undefined;
  let before = 0;
  const pulled: PulledFile[] = [];
  for (const [index, f] of plan.files.entries()) {
    const report = (done: number, total: number | undefined, cached: boolean) =>
      o.onProgress?.({ file: f.file, index, count: plan.files.length, done, total, overallDone: before + done, overallTotal, cached });
    await mkdir(dirname(f.dest), { recursive: true });
    const got = await withLockFile(
      `${f.dest}.lock`,
      async () => {
        if (!o.force && (await alreadyThere(f.dest, { size: f.size, sha256: f.sha256, knownSha256: known.get(f.dest) }))) {
          const s = (await stat(f.dest)).size;
          report(s, s, true);
          return { size: s, sha256: f.sha256 ?? known.get(f.dest)! };
        }
        return downloadFile(client, { name: f.file, url: f.url, size: f.size, sha256: f.sha256 }, f.dest, {
          stallTimeoutMs: o.stallTimeoutMs ?? 60_000,
          onBytes: (done, total) => report(done, total, false),
          ...(o.openFile ? { openFile: o.openFile } : {}),
        });
      },
      o.signal,
    );
    before += got.size;
    pulled.push({ role: f.role, file: f.file, path: f.dest, size: got.size, sha256: got.sha256 });
  }

  const entry: PulledModel = {
    reference: plan.reference,
    name: plan.name,
    quant: plan.quant,
    source: plan.source,
    path: pulled[0]!.path,
    size: pulled.reduce((a, f) => a + f.size, 0),
    files: pulled,
    pulledAt: new Date().toISOString(),
  };
  await updateManifest(dir, (models) => ({ models: [...models.filter((m) => m.reference !== entry.reference), entry], result: undefined }));
  return entry;
}

/**
 * What pull() recorded in the models folder's manifest, in pull order.
 * @example for (const m of await listModels()) console.log(m.reference, m.size, m.path);
 */
export async function listModels(options?: ModelsDirOptions): Promise<PulledModel[]> {
  const o = parseOptions(ModelsDirOptionsSchema, options, 'listModels() options');
  return readManifest(modelsDirectory(o.modelsDir));
}

/** The manifest entries a reference names: the exact reference or path, or for `org/repo`, `org/repo:TAG`, `org/repo/file` the matching ones. */
export function matchModels(models: readonly PulledModel[], input: string): PulledModel[] {
  const exact = models.filter((m) => m.reference === input || m.path === input || m.reference.toLowerCase() === input.toLowerCase());
  if (exact.length) return exact;
  let ref: ModelReference;
  try {
    ref = parseModelReference(input);
  } catch {
    return [];
  }
  if (ref.kind === 'url') return models.filter((m) => m.source.type === 'url' && m.source.url === ref.url);
  const ofRepo = models.filter((m) => m.source.type === 'hf' && m.source.repo.toLowerCase() === ref.repo.toLowerCase());
  if (ref.file !== undefined) return ofRepo.filter((m) => m.files.some((f) => f.role === 'model' && f.file === ref.file));
  if (ref.tag !== undefined) {
    const want = ref.tag.toUpperCase().replace(/^UD-/, '');
    return ofRepo.filter((m) => m.quant?.replace(/^UD-/, '') === want);
  }
  return ofRepo;
}

/**
 * The pulled model a reference names, when its files are all on disk; for `org/repo` with
 * several quants pulled, the default quant's order decides. Undefined when not pulled.
 */
export async function findModel(reference: string, options?: ModelsDirOptions): Promise<PulledModel | undefined> {
  const hits = matchModels(await listModels(options), reference);
  const rank = (m: PulledModel) => {
    const i = DEFAULT_QUANTS.indexOf((m.quant ?? '') as (typeof DEFAULT_QUANTS)[number]);
    return i === -1 ? DEFAULT_QUANTS.length : i;
  };
  for (const m of hits.sort((a, b) => rank(a) - rank(b))) {
    const present = await Promise.all(m.files.map((f) => stat(f.path).then((s) => s.size === f.size, () => false)));
    if (present.every(Boolean)) return m;
  }
  return undefined;
}

/**
 * Removes what a reference names (see matchModels; `org/repo` removes every quant of it): its
 * files, unless another entry still uses them, and its manifest entries. Returns the removed
 * entries.
 * @throws LlamuxError MODEL_NOT_FOUND when nothing matches (the message lists what is pulled)
 */
export async function removeModel(reference: string, options?: ModelsDirOptions): Promise<PulledModel[]> {
  const o = parseOptions(ModelsDirOptionsSchema, options, 'removeModel() options');
  const dir = modelsDirectory(o.modelsDir);
  const { removed, keep } = await updateManifest(dir, (models) => {
    const hit = new Set(matchModels(models, reference));
    const rest = models.filter((m) => !hit.has(m));
    return { models: rest, result: { removed: [...hit], keep: new Set(rest.flatMap((m) => m.files.map((f) => f.path))) } };
  });
  if (removed.length === 0) {
    const all = await readManifest(dir);
    throw new HubError('MODEL_NOT_FOUND', `No pulled model matches ${JSON.stringify(reference)}${all.length ? `; pulled: ${all.map((m) => m.reference).join(', ')}` : ' (nothing is pulled)'}`, {
      available: all.map((m) => m.reference),
    });
  }
  for (const f of removed.flatMap((m) => m.files)) {
    if (keep.has(f.path)) continue;
    // Only what lies inside the models folder: a hand-edited manifest cannot delete elsewhere.
    const rel = relative(dir, f.path);
    if (rel.startsWith('..') || isAbsolute(rel)) continue;
    for (const p of [f.path, `${f.path}.partial`, `${f.path}.partial.json`]) await unlink(p).catch(() => {});
    // Drop the folders left empty, up to the models folder.
    for (let d = dirname(f.path); d.startsWith(dir + sep) && d !== dir; d = dirname(d)) {
      if ((await readdir(d).catch(() => ['x'])).length > 0) break;
      await rmdir(d).catch(() => {});
    }
  }
  return removed;
}
