/**
 * The model zoo: small random-weight GGUFs with the real tensor layout of several architecture
 * families, each with a real vocabulary and chat template from llama.cpp's test data, and a
 * greedy continuation known in advance (see builder.ts).
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { hashSeed } from '../prng.js';
import { val } from '../types.js';
import type { GgufSpec, GgufValue } from '../types.js';
import { writeGgufFile } from '../writer.js';
import {
  chooseSuccessors,
  DEFAULT_SCALES,
  fileTypeOf,
  loadZooTemplate,
  loadZooVocab,
  mtpEmbedding,
  successorCodes,
  successorTensors,
  ZooBuilder,
} from './builder.js';
import type { ZooScales, ZooSuccessors } from './builder.js';
import type { ZooArchitecture, ZooFamily } from './family.js';
import { gemma4Family } from './gemma4.js';
import { glm4moeFamily } from './glm4moe.js';
import { gptOssFamily } from './gpt-oss.js';
import { graniteHybridFamily } from './granite-hybrid.js';
import { lfm2Family } from './lfm2.js';
import { llamaFamily } from './llama.js';
import { qwen35Family, qwen35moeFamily, qwen3Family } from './qwen.js';

export type { ZooArchitecture, ZooFamily } from './family.js';
export { glm4moeFamilyWith, type Glm4moeDims } from './glm4moe.js';
export { CODE_BITS, zooGreedyChain, zooSuccessor } from './builder.js';
export type { ZooScales, ZooSuccessors, ZooVocabSource } from './builder.js';

/** Bump when the generator's output changes: cached files are keyed by it. */
export const ZOO_GENERATOR_VERSION = 1;

const FAMILIES: Readonly<Record<ZooArchitecture, ZooFamily>> = {
  llama: llamaFamily,
  qwen3: qwen3Family,
  qwen35: qwen35Family,
  qwen35moe: qwen35moeFamily,
  gemma4: gemma4Family,
  'gpt-oss': gptOssFamily,
  granitehybrid: graniteHybridFamily,
  lfm2: lfm2Family,
  glm4moe: glm4moeFamily,
};

/** Every architecture of the zoo. */
export const ZOO_ARCHITECTURES: readonly ZooArchitecture[] = Object.keys(FAMILIES) as ZooArchitecture[];

/** The declaration of one family (dims, vocabulary, template). */
export function zooFamily(arch: ZooArchitecture): ZooFamily {
  const f = FAMILIES[arch];
  if (!f) throw new RangeError(`Unknown zoo architecture "${String(arch)}"`);
  return f;
}

/** Options of {@link buildZooSpec} and {@link writeZooModel}. */
export interface ZooModelOptions {
  /** Folder with llama.cpp's `ggml-vocab-*.gguf` files (`.cache/llama.cpp-models` in tests). */
  readonly vocabDir: string;
  /** Folder with llama.cpp's chat templates. Default `<vocabDir>/templates`. */
  readonly templatesDir?: string;
  /** Default 1. */
  readonly seed?: number;
  /** Scales of the successor construction (see builder.ts). */
  readonly scales?: Partial<ZooScales>;
  /**
   * Type of the block matrices (attention, FFN, experts, SSM projections). Default F32; `Q8_0`
   * gives a quantized variant (written as `<arch>-q8_0-<key>.gguf` by ensureZooModels).
   */
  readonly blockType?: 'F32' | 'F16' | 'Q8_0';
  /**
   * Families with a multi-token-prediction block (glm4moe): the share of tokens after which the
   * block's draft agrees with the trunk's greedy choice. Default 1 (always).
   */
  readonly mtpAgreement?: number;
}

/** What a test may know about a zoo model (JSON-serializable). */
export interface ZooModelDescription {
  readonly arch: ZooArchitecture;
  readonly path: string;
  readonly fileSize: number;
  readonly dims: string;
  readonly nEmbd: number;
  readonly nLayer: number;
  readonly nVocab: number;
  /** The vocab-only file the tokenizer came from. */
  readonly vocabFile: string;
  readonly templateFile: string;
  readonly note?: string;
  readonly embdType: string;
  readonly outputType: string;
  readonly blockType: string;
  readonly scales: ZooScales;
  /** MTP blocks after the trunk (0 without), and how often their drafts agree (mtpAgreement). */
  readonly mtpLayers: number;
  readonly mtpAgreement?: number;
  /** Predicts greedy output: {@link zooGreedyChain}(successors, lastPromptToken, n). */
  readonly successors: ZooSuccessors;
}

/** A zoo model in memory: its GGUF content and description (without path and size). */
export interface BuiltZooModel {
  readonly spec: GgufSpec;
  readonly description: Omit<ZooModelDescription, 'path' | 'fileSize'>;
}

/** Builds the GGUF content of a zoo model (reads the vocabulary and template files). */
export async function buildZooSpec(arch: ZooArchitecture, options: ZooModelOptions): Promise<BuiltZooModel> {
  return buildFamilySpec(zooFamily(arch), options);
}

/** {@link buildZooSpec} for a family declared elsewhere (a benchmark's larger shapes). */
export async function buildFamilySpec(f: ZooFamily, options: ZooModelOptions): Promise<BuiltZooModel> {
  const seed = options.seed ?? 1;
  const scales: ZooScales = { ...DEFAULT_SCALES, ...f.scales, ...options.scales };
  const vocab = await loadZooVocab(options.vocabDir, f.vocab);
  const template = await loadZooTemplate(options.templatesDir ?? join(options.vocabDir, 'templates'), f.template);
  const nVocab = vocab.tokens.length;
  // one seed per architecture: families that share a vocabulary still write different chains
  const archSeed = hashSeed(seed, `zoo:${f.arch}`);
  const successors = chooseSuccessors(vocab, archSeed);
  const blockType = options.blockType ?? 'F32';
  const b = new ZooBuilder(f.arch, archSeed, scales, blockType);
  const metadata: Array<readonly [string, GgufValue]> = [
    ['general.architecture', val.string(f.arch)],
    ['general.name', val.string(`llamux-zoo-${f.arch}`)],
    ['general.description', val.string(`llamux model zoo: random weights with the ${f.arch} layout (generator v${ZOO_GENERATOR_VERSION}, seed ${seed})`)],
    ['general.file_type', val.u32(fileTypeOf(blockType === 'Q8_0' || f.embdType === 'Q8_0' || f.outputType === 'Q8_0' ? 'Q8_0' : f.embdType))],
    ['general.quantization_version', val.u32(2)],
    [`${f.arch}.vocab_size`, val.u32(nVocab)],
    [`${f.arch}.context_length`, val.u32(f.contextLength)],
    [`${f.arch}.embedding_length`, val.u32(f.nEmbd)],
    [`${f.arch}.block_count`, val.u32(f.nLayer + (f.mtp?.layers ?? 0))],
  ];
  f.build(b);
  metadata.push(...b.metadata, ...vocab.metadata, ['tokenizer.chat_template', val.string(template)]);
  const { embd, output } = successorTensors(successors, nVocab, f.nEmbd, scales, archSeed, f.embdType, f.outputType);
  const tensors = [
    embd,
    { name: f.outputNorm ?? 'output_norm.weight', shape: [f.nEmbd], type: 'F32' as const, data: (_s: number, out: Float32Array) => out.fill(1) },
    output,
    ...b.tensors,
  ];
  const agreement = options.mtpAgreement ?? 1;
  if (f.mtp && agreement < 1) {
    tensors.push(mtpEmbedding(successors, nVocab, f.nEmbd, scales, archSeed, f.embdType, f.mtp.embedding, agreement));
  }
  return {
    spec: { metadata, tensors },
    description: {
      arch: f.arch,
      dims: f.dims,
      nEmbd: f.nEmbd,
      nLayer: f.nLayer,
      nVocab,
      vocabFile: f.vocab.file,
      templateFile: f.template,
      ...(f.note ? { note: f.note } : {}),
      embdType: f.embdType,
      outputType: f.outputType,
      blockType,
      scales,
      mtpLayers: f.mtp?.layers ?? 0,
      ...(f.mtp ? { mtpAgreement: agreement } : {}),
      successors,
    },
  };
}

/**
 * Writes one zoo model to `path` (atomically, streamed). Deterministic: the same architecture,
 * options and vocabulary files give the same bytes.
 *
 * @example
 * const d = await writeZooModel('qwen35', '.cache/zoo/qwen35.gguf', { vocabDir: '.cache/llama.cpp-models' });
 */
export async function writeZooModel(arch: ZooArchitecture | ZooFamily, path: string, options: ZooModelOptions): Promise<ZooModelDescription> {
  const built = await buildFamilySpec(typeof arch === 'string' ? zooFamily(arch) : arch, options);
  const layout = await writeGgufFile(path, built.spec);
  return { ...built.description, path, fileSize: layout.fileSize };
}

/** Options of {@link ensureZooModels}. */
export interface EnsureZooModelsOptions extends ZooModelOptions {
  /** Default all of {@link ZOO_ARCHITECTURES}. */
  readonly architectures?: readonly ZooArchitecture[];
}

async function cacheKey(arch: ZooArchitecture, options: ZooModelOptions): Promise<string> {
  const f = zooFamily(arch);
  const h = createHash('sha256');
  h.update(
    JSON.stringify({
      v: ZOO_GENERATOR_VERSION,
      arch,
      seed: options.seed ?? 1,
      scales: { ...DEFAULT_SCALES, ...f.scales, ...options.scales },
      blockType: options.blockType ?? 'F32',
      mtpAgreement: options.mtpAgreement ?? 1,
    }),
  );
  // the generator's own source text, so an edited generator regenerates without a version bump
  h.update([buildZooSpec, buildFamilySpec, successorTensors, successorCodes, chooseSuccessors, loadZooVocab, ZooBuilder, mtpEmbedding].map(String).join('\n'));
  // the family's declaration, its builder's source text included
  h.update(JSON.stringify(f, (_k, v: unknown) => (typeof v === 'function' ? String(v) : v)));
  h.update(await readFile(join(options.vocabDir, f.vocab.file)));
  h.update(await readFile(join(options.templatesDir ?? join(options.vocabDir, 'templates'), f.template)));
  return h.digest('hex').slice(0, 16);
}

/**
 * Generates the zoo into `dir` once: each model is written as `<arch>[-<blockType>]-<key>.gguf` (the key hashes
 * the generator version, the options, the family declaration, the vocabulary and the template
 * files), with a `.json` description beside it, unless it is already there; older files of the
 * same architecture are removed. Concurrent callers are safe (atomic renames).
 */
export async function ensureZooModels(
  dir: string,
  options: EnsureZooModelsOptions,
): Promise<Record<ZooArchitecture, ZooModelDescription>> {
  await mkdir(dir, { recursive: true });
  const out = {} as Record<ZooArchitecture, ZooModelDescription>;
  for (const arch of options.architectures ?? ZOO_ARCHITECTURES) {
    const key = await cacheKey(arch, options);
    const variant = options.blockType && options.blockType !== 'F32' ? `${arch}-${options.blockType.toLowerCase()}` : arch;
    const base = `${variant}-${key}`;
    const path = join(dir, `${base}.gguf`);
    const jsonPath = join(dir, `${base}.json`);
    let description: ZooModelDescription | undefined;
    try {
      const d = JSON.parse(await readFile(jsonPath, 'utf8')) as ZooModelDescription;
      if ((await stat(path)).size === d.fileSize && d.path === path) description = d;
    } catch {
      description = undefined;
    }
    if (!description) {
      description = await writeZooModel(arch, path, options);
      const tmp = `${jsonPath}.${process.pid}.tmp`;
      await writeFile(tmp, `${JSON.stringify(description, null, 2)}\n`);
      await rename(tmp, jsonPath);
      for (const name of await readdir(dir)) {
        if (name.startsWith(`${variant}-`) && !name.startsWith(base) && new RegExp(`^${variant}-[0-9a-f]{16}\\.(gguf|json)$`).test(name)) {
          await rm(join(dir, name), { force: true });
        }
      }
    }
    out[arch] = description;
  }
  return out;
}
