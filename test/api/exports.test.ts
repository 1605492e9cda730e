import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import * as llamux from '../../src/index.js';
import { projectRoot } from '../helpers/paths.js';

const srcDir = join(projectRoot, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return sourceFiles(p);
    return p.endsWith('.ts') ? [p] : [];
  });
}

/** Runtime imports (not `import type`, not `{ type A }`-only) of a source file, as absolute .ts paths. */
function runtimeImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/^(?:import|export)\s+(type\s+)?([^;]*?)\s+from\s+'(\.[^']+)'/gms)) {
    if (m[1]) continue;
    const body = m[2]!.trim();
    if (body.startsWith('{')) {
      const items = body.slice(1, -1).split(',').map((s) => s.trim()).filter(Boolean);
      if (items.length > 0 && items.every((s) => s.startsWith('type '))) continue;
    }
    out.push(resolve(dirname(file), m[3]!.replace(/\.js$/, '.ts')));
  }
  // Dynamic imports load lazily: they are not part of the static graph.
  return out;
}

describe('the public surface', () => {
  it('src/index.ts is an explicit barrel (no export *)', () => {
    const text = readFileSync(join(srcDir, 'index.ts'), 'utf8');
    expect(text).not.toMatch(/^\s*export \*/m);
  });

  it('exports the values users, the tests, the server, the CLI and the bench import', () => {
    for (const name of [
      'loadModel', 'Model', 'TokenAttribute', 'Context', 'Generation', 'Session', 'LlamuxError', 'isLlamuxError', 'ERROR_CODES',
      'setLogger', 'MARKER_PRESETS', 'detectMarkerPreset', 'tokenizeMarker', 'defineTool', 'askUser', 'halt', 'ok', 'toolError',
      'runToolCalls', 'streamToolCalls', 'ToolCallAccumulator', 'ChatTemplate', 'buildChatPrompt', 'renderChat', 'Agent', 'compileToolGrammar', 'ModelPool',
      'pull', 'listModels', 'removeModel', 'findModel', 'HubError',
    ]) {
      expect(llamux, name).toHaveProperty(name);
    }
  });

  it('keeps internals out of the root export', () => {
    for (const name of ['alnum9', 'canonicalJson', 'interpretHandlerReturn', 'TOOL_RESULT_TAG', 'isZodSchema', 'native', 'toInt32Array', 'fromNative', 'parseOptions', 'writeScriptedModel', 'writeRandomModel', 'ensureTestModels']) {
      expect(llamux, name).not.toHaveProperty(name);
    }
  });

  it('has no import cycles in src/', () => {
    const graph = new Map(sourceFiles(srcDir).map((f) => [f, runtimeImports(f)]));
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const stack: string[] = [];
    const visit = (f: string) => {
      state.set(f, 'open');
      stack.push(f);
      for (const d of graph.get(f) ?? []) {
        if (state.get(d) === 'open') cycles.push([...stack.slice(stack.indexOf(d)), d].map((p) => relative(srcDir, p)).join(' -> '));
        else if (!state.has(d)) visit(d);
      }
      stack.pop();
      state.set(f, 'done');
    };
    for (const f of graph.keys()) if (!state.has(f)) visit(f);
    expect(cycles).toEqual([]);
  });

  it('the root export does not load the GGUF fixture generators; they are llamux/testing', () => {
    const seen = new Set<string>();
    const walk = (f: string) => {
      if (seen.has(f)) return;
      seen.add(f);
      for (const d of runtimeImports(f)) walk(d);
    };
    walk(join(srcDir, 'index.ts'));
    const gguf = [...seen].map((p) => relative(srcDir, p)).filter((p) => p.startsWith('gguf/') && p !== 'gguf/errors.ts');
    expect(gguf).toEqual([]);
    const pkg = JSON.parse(readFileSync(join(projectRoot, 'package.json'), 'utf8')) as { exports: Record<string, { default: string }> };
    expect(pkg.exports['./testing']?.default).toBe('./dist/gguf/index.js');
  });
});
