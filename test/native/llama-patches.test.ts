// llamux's changes to the pinned llama.cpp source (scripts/llama-patches.mjs, issue 13): each
// applies to the pinned release exactly once, the tree that builds carries it, and an anchor
// that moved (a llama.cpp upgrade) stops the export instead of building unpatched.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs build script without types
import { applyLlamaCppPatches, LLAMA_CPP_PATCHES, llamaCppPatchIds } from '../../scripts/llama-patches.mjs';
import { projectRoot, tempDir } from '../helpers/paths.js';

type Patch = { id: string; file: string; edits: Array<{ find: string; replace: string }> };
const patches = LLAMA_CPP_PATCHES as Patch[];
const gitDir = join(projectRoot, '.cache', 'llama.cpp.git');

/** The pinned release's copy of `file`, from the bare clone of node-llama-cpp's bundle. */
function pristine(file: string): string {
  const r = spawnSync('git', ['--git-dir', gitDir, 'show', `HEAD:${file}`], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout;
}

function treeWith(files: Record<string, string>): string {
  const dir = tempDir('llama-patches');
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), text);
  }
  return dir;
}

describe('llama.cpp patches', () => {
  it('apply to the pinned release, and the built tree carries them', () => {
    const files = Object.fromEntries(patches.map((p) => [p.file, pristine(p.file)]));
    const dir = treeWith(files);
    applyLlamaCppPatches(dir);
    for (const p of patches) {
      const patched = readFileSync(join(dir, p.file), 'utf8');
      // an edit is in the tree, unless a later patch rewrites part of it (det-fa-fixed's dispatch)
      const later = patches.slice(patches.indexOf(p) + 1).filter((q) => q.file === p.file).flatMap((q) => q.edits);
      for (const e of p.edits) if (!later.some((l) => e.replace.includes(l.find))) expect(patched).toContain(e.replace);
      // deps/llama.cpp (what the addon was built from) is the same text
      expect(readFileSync(join(projectRoot, 'deps', 'llama.cpp', p.file), 'utf8')).toBe(patched);
    }
    const source = JSON.parse(readFileSync(join(projectRoot, 'deps', 'llama.cpp', 'llamux-source.json'), 'utf8')) as { patches?: string[] };
    expect(source.patches).toEqual(llamaCppPatchIds);
  });

  it('refuses a tree whose anchor moved, naming the patch', () => {
    const p = patches.find((x) => x.id === 'fa-tiled-min-q')!;
    const dir = treeWith({ [p.file]: pristine(p.file).replace('neq1 >= Q_TILE_SZ);', 'neq1 >= Q_TILE_SZ && true);') });
    expect(() => applyLlamaCppPatches(dir)).toThrow(/fa-tiled-min-q does not apply to ggml\/src\/ggml-cpu\/ops\.cpp/);
  });

  it('cannot apply twice (an anchor must match exactly once)', () => {
    const dir = treeWith(Object.fromEntries(patches.map((p) => [p.file, pristine(p.file)])));
    applyLlamaCppPatches(dir);
    expect(() => applyLlamaCppPatches(dir)).toThrow(/does not apply/);
  });
});
