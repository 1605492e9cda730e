// src/ is layered: no file may reach itself again through its imports, `import type`,
// `export ... from`, `declare module` augmentations and dynamic `import()` included (a
// type-only circle is still a circle a reader has to untangle). The graph is read with
// TypeScript's own pre-processor (ts.preProcessFile), so every import form counts.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../helpers/paths.js';

const srcDir = join(projectRoot, 'src');

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...tsFiles(path));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(path);
  }
  return out.sort();
}

/** The files of `known` that a source text (the file `file`) imports or re-exports: relative
 * specifiers only, `.js` → `.ts`, a folder → its index.ts. */
function importsOf(file: string, text: string, known: ReadonlySet<string>): string[] {
  const info = ts.preProcessFile(text, true, true);
  const targets = new Set<string>();
  for (const { fileName } of info.importedFiles) {
    if (!fileName.startsWith('.') || /\.(json|node)$/.test(fileName)) continue;
    const base = resolve(dirname(file), fileName);
    const candidates = [base.replace(/\.js$/, '.ts'), `${base}.ts`, join(base, 'index.ts')];
    const hit = candidates.find((c) => known.has(c));
    if (hit === undefined) throw new Error(`${relative(projectRoot, file)}: cannot resolve "${fileName}" to a file under src/`);
    targets.add(hit);
  }
  return [...targets].sort();
}

/** Import graph of src/: file → files it imports, keyed by path relative to the project root. */
function importGraph(): Map<string, string[]> {
  const files = tsFiles(srcDir);
  const known = new Set(files);
  const rel = (p: string): string => relative(projectRoot, p).split('\\').join('/');
  return new Map(files.map((f) => [rel(f), importsOf(f, readFileSync(f, 'utf8'), known).map(rel)]));
}

/** Tarjan's strongly connected components; returns the cycles (components of more than one
 * file, or one file that imports itself), each sorted, largest first. */
function importCycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const cycles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) cycles.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return cycles.sort((a, b) => b.length - a.length || a[0]!.localeCompare(b[0]!));
}

describe('src/ import graph', () => {
  it('finds every circle and self-import (the check itself)', () => {
    const g = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a']],
      ['d', ['d']],
      ['e', ['a']],
    ]);
    expect(importCycles(g)).toEqual([['a', 'b', 'c'], ['d']]);
  });

  it('sees type imports, re-exports, module augmentations and dynamic imports, not only value imports', () => {
    const dir = join(srcDir, 'x');
    const known = new Set(['a', 'b', 'c', 'd', 'e', 'f', 'g/index', 'h', 'z'].map((n) => join(dir, `${n}.ts`)));
    const text = [
      "import type { A } from './a.js';",
      "import { type B } from './b.js';",
      "export { C } from './c.js';",
      "export type { D } from './d.js';",
      "declare module './e.js' { interface E { x: 1 } }",
      "const f = await import('./f.js');",
      "export * from './g/index.js';",
      "import './h.js';",
      "import { z } from 'zod';",
    ].join('\n');
    const names = importsOf(join(dir, 'z.ts'), text, known).map((p) => relative(dir, p));
    expect(names).toEqual(['a.ts', 'b.ts', 'c.ts', 'd.ts', 'e.ts', 'f.ts', join('g', 'index.ts'), 'h.ts']);
    const graph = importGraph();
    expect(graph.size).toBeGreaterThan(50);
    expect(graph.get('src/index.ts')!.length).toBeGreaterThan(5);
  });

  it('has no import circle, type imports included', () => {
    const graph = importGraph();
    const listing = importCycles(graph)
      .map((files, i) => {
        const inCycle = new Set(files);
        const edges = files.map((f) => `  ${f} -> ${graph.get(f)!.filter((t) => inCycle.has(t)).join(', ')}`);
        return `cycle ${i + 1} (${files.length} files):\n${edges.join('\n')}`;
      })
      .join('\n');
    expect(listing, `import circles in src/ (open them with a small interface, or move the shared type to its own file):\n${listing}`).toBe('');
  });
});
