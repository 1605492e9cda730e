// Generated multimodal projectors (src/gguf/projector.ts) for the zoo's text models, written
// once into .cache/mmproj and reused while the generator's options are unchanged.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  buildAudioProjectorSpec,
  buildProjectorSpec,
  buildQwen3vlProjectorSpec,
  writeGgufFile,
  type AudioProjectorDescription,
  type AudioProjectorOptions,
  type GgufSpec,
  type ProjectorDescription,
  type ProjectorOptions,
  type Qwen3vlProjectorDescription,
  type Qwen3vlProjectorOptions,
} from '../../src/gguf/index.js';
import { projectRoot } from './paths.js';

const dir = join(projectRoot, '.cache', 'mmproj');
/** Bump when src/gguf/projector.ts writes different files for the same options. */
const GENERATOR_VERSION = 1;

async function ensureFile(family: string, options: object, spec: GgufSpec): Promise<string> {
  const key = createHash('sha256').update(JSON.stringify({ v: GENERATOR_VERSION, ...options })).digest('hex').slice(0, 16);
  const path = join(dir, `${family}-${key}.gguf`);
  if (!existsSync(path)) {
    mkdirSync(dir, { recursive: true });
    await writeGgufFile(path, spec);
  }
  return path;
}

/** A gemma3-style projector for a text model `projectionDim` wide: its path and description. */
export async function ensureProjector(options: ProjectorOptions): Promise<ProjectorDescription & { path: string }> {
  const built = buildProjectorSpec(options);
  return { ...built.description, path: await ensureFile('gemma3', options, built.spec) };
}

/** A Qwen3-VL-style (qwen3vl_merger) projector for a text model `projectionDim` wide. */
export async function ensureQwen3vlProjector(options: Qwen3vlProjectorOptions): Promise<Qwen3vlProjectorDescription & { path: string }> {
  const built = buildQwen3vlProjectorSpec(options);
  return { ...built.description, path: await ensureFile('qwen3vl', options, built.spec) };
}

/** A qwen2a-style audio projector (src/gguf/audio-projector.ts) for a text model `projectionDim` wide. */
export async function ensureAudioProjector(options: AudioProjectorOptions): Promise<AudioProjectorDescription & { path: string }> {
  const built = buildAudioProjectorSpec(options);
  return { ...built.description, path: await ensureFile('qwen2a', options, built.spec) };
}
