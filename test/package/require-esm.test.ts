// llamux is ESM, and CommonJS apps load it with require() (Node 20.19+ and 22.12+ run an ES
// module graph synchronously when none of its modules uses top-level await). Two things keep
// that working, checked here without building: every export path has a condition require()
// matches, and no module in src/ has a top-level await (which makes require() throw
// ERR_REQUIRE_ASYNC_MODULE). consumer.test.ts require()s the packed package for real.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../helpers/paths.js';

const pkg = JSON.parse(readFileSync(join(projectRoot, 'package.json'), 'utf8')) as {
  engines: { node: string };
  exports: Record<string, string | Record<string, string>>;
  typesVersions: Record<string, Record<string, string[]>>;
};

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : /\.(m|c)?ts$/.test(e.name) && !e.name.endsWith('.d.ts') ? [join(dir, e.name)] : [],
  );
}

/** Line numbers of `await` (and `for await`) outside any function in one file. */
function topLevelAwaits(file: string, text = readFileSync(file, 'utf8')): number[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: number[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) || ts.isClassStaticBlockDeclaration(node)) return;
    if (ts.isAwaitExpression(node) || (ts.isForOfStatement(node) && node.awaitModifier)) {
      found.push(sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

describe('require() of llamux', () => {
  it('finds every export path under the conditions require() uses', () => {
    for (const [path, target] of Object.entries(pkg.exports)) {
      if (typeof target === 'string') continue; // ./package.json
      expect(Object.keys(target), path).toEqual(['types', 'default']);
      expect(target.default, path).toMatch(/^\.\/dist\/.+\.js$/);
    }
    // node10 resolution (TypeScript's `module: commonjs`) ignores "exports": the subpaths' types
    for (const [path, target] of Object.entries(pkg.exports)) {
      if (path === '.' || typeof target === 'string') continue;
      expect(pkg.typesVersions['*']?.[path.slice(2)], path).toEqual([target.types]);
    }
    // the Node versions whose require() loads ES modules without a flag
    expect(pkg.engines.node).toBe('^20.19.0 || >=22.12.0');
  });

  it('meets no top-level await anywhere in src/', () => {
    const files = sources(join(projectRoot, 'src'));
    expect(files.length).toBeGreaterThan(20);
    const hits = files.flatMap((f) => topLevelAwaits(f).map((line) => `${relative(projectRoot, f)}:${line}`));
    expect(hits).toEqual([]);
  });

  it('recognises a top-level await when it sees one', () => {
    const text = [
      'const a = await Promise.resolve(1);',
      'async function f() { await a; }',
      'for await (const x of []) void x;',
      'const g = async () => { await f(); };',
      'class C { static { void g; } m = async () => await a; }',
      'export default await import("node:fs");',
    ].join('\n');
    expect(topLevelAwaits('sample.ts', text)).toEqual([1, 3, 6]);
  });
});
