// Model references: `org/repo:QUANT`, `org/repo/path/file.gguf`, `org/repo` (a default quant)
// or an http(s) URL; and the file names a hub listing hands us, which become paths on disk.
import { LlamuxError } from '../errors.js';
import { HubError } from './errors.js';

export type ModelReference =
  | {
      readonly kind: 'hf';
      /** `org/repo`. */
      readonly repo: string;
      /** The quant tag asked for (`Q4_K_M`), as typed. */
      readonly tag?: string;
      /** A file of the repository (`sub/model-Q4_K_M.gguf`). */
      readonly file?: string;
      readonly revision?: string;
      /** Set when the reference was a resolve URL of a hub: that hub's base URL. */
      readonly endpoint?: string;
    }
  | { readonly kind: 'url'; readonly url: string };

// Hugging Face repository names: letters, digits, '-', '_', '.', not starting with '.' or '-'.
const NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}$/;
const TAG = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

function invalid(ref: string, why: string): LlamuxError {
  return new LlamuxError(
    'INVALID_ARGUMENT',
    `Invalid model reference ${JSON.stringify(ref)}: ${why}. Expected org/repo, org/repo:QUANT, org/repo/file.gguf or an http(s) URL`,
  );
}

/**
 * A relative path inside a repository or the models folder, checked: no `..` or `.` segment,
 * not absolute, no backslash, no drive letter, no NUL, no empty segment. Throws INVALID_ARGUMENT.
 */
export function safeRelativePath(name: string, what = 'file name'): string {
  const bad = (why: string) => new LlamuxError('INVALID_ARGUMENT', `Refusing ${what} ${JSON.stringify(name)}: ${why}`);
  if (typeof name !== 'string' || name.length === 0 || name.length > 1024) throw bad('empty or too long');
  if (name.includes('\\')) throw bad('it contains a backslash');
  if (name.includes('\0')) throw bad('it contains a NUL byte');
  if (name.startsWith('/') || /^[A-Za-z]:/.test(name)) throw bad('it is an absolute path');
  for (const seg of name.split('/')) {
    if (seg === '..') throw bad('it contains ".."');
    if (seg === '' || seg === '.') throw bad('it has an empty or "." segment');
  }
  return name;
}

/** safeRelativePath for a file inside a reference: the error names the whole reference. */
function safeRefFile(ref: string, path: string): string {
  try {
    return safeRelativePath(path);
  } catch (e) {
    throw invalid(ref, (e as Error).message.replace(/^Refusing /, 'refusing '));
  }
}

function checkRepo(ref: string, org: string, name: string): string {
  for (const part of [org, name]) {
    if (!NAME.test(part) || part.includes('..')) throw invalid(ref, `"${part}" is not a repository name`);
  }
  return `${org}/${name}`;
}

/** Reads a reference; throws INVALID_ARGUMENT when malformed. `endpoint` lets its resolve URLs count as hub references. */
export function parseModelReference(input: string, endpoint?: string): ModelReference {
  if (typeof input !== 'string') throw invalid(String(input), 'not a string');
  const ref = input.trim();
  if (ref === '') throw invalid(input, 'it is empty');
  if (/^https?:\/\//i.test(ref)) return parseUrl(ref, endpoint);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(ref) && !/^hf:\/\//i.test(ref)) throw invalid(ref, 'only http and https URLs can be pulled');
  const body = ref.replace(/^(hf:\/\/|hf:|hf\.co\/|huggingface\.co\/)/i, '');
  const parts = body.split('/');
  if (parts.length < 2 || parts.some((p) => p === '')) throw invalid(ref, 'it needs an organisation and a repository');
  if (parts.length === 2) {
    const [org, rest] = parts as [string, string];
    const colon = rest.indexOf(':');
    if (colon === -1) return { kind: 'hf', repo: checkRepo(ref, org, rest) };
    const tag = rest.slice(colon + 1);
    if (!TAG.test(tag)) throw invalid(ref, `"${tag}" is not a quant tag`);
    return { kind: 'hf', repo: checkRepo(ref, org, rest.slice(0, colon)), tag };
  }
  const [org, name, ...file] = parts as [string, string, ...string[]];
  const path = file.join('/');
  if (!/\.gguf$/i.test(path)) throw invalid(ref, `"${path}" is not a .gguf file`);
  return { kind: 'hf', repo: checkRepo(ref, org, name), file: safeRefFile(ref, path) };
}

function parseUrl(ref: string, endpoint: string | undefined): ModelReference {
  let url: URL;
  try {
    url = new URL(ref);
  } catch {
    throw invalid(ref, 'not a valid URL');
  }
  if (url.username || url.password) throw invalid(ref, 'credentials in the URL are not accepted (set HF_TOKEN)');
  // A resolve (or blob) URL of the configured hub is a hub file: its listing gives the sha256.
  const hubs = [endpoint, 'https://huggingface.co'].filter((e): e is string => e !== undefined).map((e) => new URL(e));
  const hub = hubs.find((h) => h.origin === url.origin && url.pathname.startsWith(h.pathname.replace(/\/?$/, '/')));
  if (hub) {
    const rel = url.pathname.slice(hub.pathname.replace(/\/?$/, '/').length).split('/').map(decodeURIComponent);
    if (rel.length >= 5 && (rel[2] === 'resolve' || rel[2] === 'blob')) {
      const [org, name, , revision, ...file] = rel as [string, string, string, string, ...string[]];
      return { kind: 'hf', repo: checkRepo(ref, org, name), revision, file: safeRefFile(ref, file.join('/')), endpoint: hub.href.replace(/\/$/, '') };
    }
  }
  const base = decodeURIComponent(url.pathname.split('/').pop() ?? '');
  if (base === '') throw invalid(ref, 'the URL does not name a file');
  safeRefFile(ref, base);
  return { kind: 'url', url: url.href };
}

/** The canonical text of a reference, as the manifest stores it. */
export function formatReference(ref: ModelReference): string {
  if (ref.kind === 'url') return ref.url;
  return ref.file !== undefined ? `${ref.repo}/${ref.file}` : ref.tag !== undefined ? `${ref.repo}:${ref.tag}` : ref.repo;
}

// ---- quant tags --------------------------------------------------------------------------

const SPLIT = /-(\d{5})-of-(\d{5})(?=\.gguf$)/i;
// A quant tag at the end of a file stem, after '-', '.' or '_' (UD- is Unsloth's dynamic prefix).
const QUANT_AT_END = /(?:^|[-._])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16|FP32|MXFP4(?:_MOE)?|TQ\d_\d))$/i;
const QUANT_WHOLE = /^(?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16|FP32|MXFP4(?:_MOE)?|TQ\d_\d)$/i;

/** `-00001-of-00003` of a split GGUF: [part, count], or undefined. */
export function splitPart(path: string): [number, number] | undefined {
  const m = SPLIT.exec(path);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

/** The quant tag of a GGUF file name (upper case), from its stem, else from its folder's name. */
export function quantTagOf(path: string): string | undefined {
  const segs = path.replace(SPLIT, '').split('/');
  const stem = segs.pop()!.replace(/\.gguf$/i, '');
  const m = QUANT_AT_END.exec(stem);
  if (m) return m[1]!.toUpperCase();
  const dir = segs.pop();
  return dir !== undefined && QUANT_WHOLE.test(dir) ? dir.toUpperCase() : undefined;
}

const base = (p: string): string => p.split('/').pop()!;
/** Vision projectors (mmproj-*.gguf, *-mmproj-*.gguf). */
export const isMmproj = (p: string): boolean => /\.gguf$/i.test(p) && /(^|[-._])mmproj([-._]|$)/i.test(base(p));
/** Draft or multi-token-prediction companions (*-mtp-*.gguf, *-draft*.gguf). */
export const isDraft = (p: string): boolean => /\.gguf$/i.test(p) && /(^|[-._])(mtp|draft)([-._]|$)/i.test(base(p));
const isImatrix = (p: string): boolean => /imatrix/i.test(base(p));

/** One model in a repository: one file, or every part of a split GGUF (part 1 first). */
export interface ModelFileGroup {
  readonly tag: string | undefined;
  readonly files: string[];
}

/** The repository's models: GGUFs that are not projectors, drafts or imatrix data, split parts grouped. */
export function modelGroups(paths: readonly string[]): ModelFileGroup[] {
  const groups = new Map<string, string[]>();
  for (const p of paths) {
    if (!/\.gguf$/i.test(p) || isMmproj(p) || isDraft(p) || isImatrix(p)) continue;
    const key = p.replace(SPLIT, '');
    groups.set(key, [...(groups.get(key) ?? []), p]);
  }
  return [...groups.values()].map((files) => ({
    tag: quantTagOf(files[0]!),
    files: files.sort((a, b) => (splitPart(a)?.[0] ?? 0) - (splitPart(b)?.[0] ?? 0)),
  }));
}

/** The default quant of `org/repo` without a tag, in this order of preference. */
export const DEFAULT_QUANTS = ['Q4_K_M', 'Q4_K_S', 'UD-Q4_K_XL', 'Q4_0', 'Q5_K_M', 'Q6_K', 'Q8_0', 'BF16', 'F16', 'F32'] as const;

const sortTags = (tags: Iterable<string>): string[] => [...new Set(tags)].sort();

/**
 * The model files a tag (or, without one, the default quant) names among `paths`. Case-
 * insensitive; `Q4_K_XL` also finds `UD-Q4_K_XL`. Throws MODEL_NOT_FOUND listing the tags.
 */
export function resolveQuant(repo: string, paths: readonly string[], tag: string | undefined): ModelFileGroup {
  const groups = modelGroups(paths);
  const tags = sortTags(groups.flatMap((g) => (g.tag ? [g.tag] : [])));
  if (groups.length === 0) throw new HubError('MODEL_NOT_FOUND', `${repo} has no GGUF model file`, { available: [] });
  let hits: ModelFileGroup[];
  if (tag === undefined) {
    if (groups.length === 1) return groups[0]!;
    const pick = DEFAULT_QUANTS.find((q) => groups.some((g) => g.tag === q));
    if (pick === undefined) {
      throw new HubError('MODEL_NOT_FOUND', `${repo} has several models and none of the default quants (${DEFAULT_QUANTS.join(', ')}); name one: ${tags.map((t) => `${repo}:${t}`).join(', ') || groups.map((g) => `${repo}/${g.files[0]}`).join(', ')}`, { available: tags });
    }
    hits = groups.filter((g) => g.tag === pick);
  } else {
    const want = tag.toUpperCase();
    hits = groups.filter((g) => g.tag === want);
    if (hits.length === 0) hits = groups.filter((g) => g.tag?.replace(/^UD-/, '') === want.replace(/^UD-/, ''));
    if (hits.length === 0) {
      throw new HubError('MODEL_NOT_FOUND', `${repo} has no quant "${tag}"; available: ${tags.join(', ') || '(no tagged files)'}`, { available: tags });
    }
  }
  if (hits.length > 1) {
    const files = hits.map((g) => g.files[0]!);
    throw new HubError('MODEL_NOT_FOUND', `${repo}: quant ${hits[0]!.tag} names ${hits.length} models (${files.join(', ')}); pull one as ${repo}/FILE`, { available: files });
  }
  return hits[0]!;
}

/** Every part of a split GGUF named by its first part (or any part), from the listing; a missing part → MODEL_NOT_FOUND. */
export function splitParts(repo: string, file: string, paths: readonly string[]): string[] {
  const sp = splitPart(file);
  if (!sp) return [file];
  const [, count] = sp;
  const width = SPLIT.exec(file)![1]!.length;
  const out: string[] = [];
  for (let i = 1; i <= count; i++) {
    const part = file.replace(SPLIT, `-${String(i).padStart(width, '0')}-of-${SPLIT.exec(file)![2]}`);
    if (!paths.includes(part)) throw new HubError('MODEL_NOT_FOUND', `${repo}: split GGUF part ${part} is missing from the repository`, { available: [] });
    out.push(part);
  }
  return out;
}

/** The projector to pull beside a model: the one whose precision is preferred (F16, BF16, F32, Q8_0, any). */
export function pickMmproj(paths: readonly string[]): string | undefined {
  const all = paths.filter(isMmproj).sort();
  for (const q of ['F16', 'BF16', 'F32', 'Q8_0']) {
    const hit = all.find((p) => quantTagOf(p) === q);
    if (hit) return hit;
  }
  return all[0];
}
