// Generated multimodal projectors (src/gguf/projector.ts) for the zoo's text models, written
// once into .cache/mmproj and reused while the generator's options are unchanged.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  buildAudioProjectorSpec,
  buildProjectorSpec,
  writeGgufFile,
  type AudioProjectorDescription,
  type AudioProjectorOptions,
  type ProjectorDescription,
  type ProjectorOptions,
} from '../../src/gguf/index.js';
import { projectRoot } from './paths.js';

const dir = join(projectRoot, '.cache', 'mmproj');
/** Bump when src/gguf/projector.ts writes different files for the same options. */
const GENERATOR_VERSION = 1;

/** A gemma3-style projector for a text model `projectionDim` wide: its path and description. */
export async function ensureProjector(options: ProjectorOptions): Promise<ProjectorDescription & { path: string }> {
  const key = createHash('sha256').update(JSON.stringify({ v: GENERATOR_VERSION, ...options })).digest('hex').slice(0, 16);
  const path = join(dir, `gemma3-${key}.gguf`);
  const built = buildProjectorSpec(options);
  if (!existsSync(path)) {
    mkdirSync(dir, { recursive: true });
    await writeGgufFile(path, built.spec);
  }
  return { ...built.description, path };
}

/** A qwen2a-style audio projector (src/gguf/audio-projector.ts) for a text model `projectionDim` wide. */
export async function ensureAudioProjector(options: AudioProjectorOptions): Promise<AudioProjectorDescription & { path: string }> {
  const key = createHash('sha256').update(JSON.stringify({ v: GENERATOR_VERSION, ...options })).digest('hex').slice(0, 16);
  const path = join(dir, `qwen2a-${key}.gguf`);
  const built = buildAudioProjectorSpec(options);
  if (!existsSync(path)) {
    mkdirSync(dir, { recursive: true });
    await writeGgufFile(path, built.spec);
  }
  return { ...built.description, path };
}
