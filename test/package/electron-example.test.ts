// examples/electron, checked statically: its packaging test (electron-builder, a headless start of
// the packed app) runs in .github/workflows/packages.yml on each OS, not here (no display, and
// Electron downloads its binaries at install time).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../helpers/paths.js';

const dir = join(projectRoot, 'examples', 'electron');
const read = (f: string): string => readFileSync(join(dir, f), 'utf8');

describe('examples/electron', () => {
  const pkg = JSON.parse(read('package.json')) as {
    main: string;
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
    build: { asarUnpack: string[]; files: string[]; npmRebuild: boolean };
  };

  it('unpacks the addon and the libraries beside it from the asar, together', () => {
    expect(pkg.build.asarUnpack).toEqual(expect.arrayContaining(['node_modules/llamux/prebuilds/**', 'node_modules/llamux/build/Release/**', 'node_modules/@llamux/**', '**/*.node']));
    expect(pkg.build.npmRebuild).toBe(false);
    for (const f of pkg.build.files.filter((x) => !x.includes('*'))) expect(() => read(f), f).not.toThrow();
    expect(pkg.build.files).toContain(pkg.main);
  });

  it('loads llamux only in a utility process, with the model from the user data folder', () => {
    const main = read('main.mjs');
    expect(main).toMatch(/utilityProcess\.fork\(/);
    expect(main).toMatch(/app\.getPath\('userData'\)/);
    expect(main).not.toMatch(/from 'llamux'/);
    expect(read('worker.mjs')).toMatch(/import \{ loadModel, setLogger \} from 'llamux'/);
    expect(read('worker.mjs')).toMatch(/process\.parentPort/);
  });

  it('keeps electron out of llamux itself', () => {
    const root = JSON.parse(readFileSync(join(projectRoot, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
    for (const k of ['dependencies', 'devDependencies', 'peerDependencies', 'optionalDependencies']) {
      expect(Object.keys(root[k] ?? {}).filter((n) => n.startsWith('electron'))).toEqual([]);
    }
    expect(Object.keys(pkg.devDependencies)).toEqual(expect.arrayContaining(['electron', 'electron-builder']));
  });

  it('is covered by the packages workflow', () => {
    const wf = readFileSync(join(projectRoot, '.github', 'workflows', 'packages.yml'), 'utf8');
    expect(wf).toMatch(/examples\/electron/);
    expect(wf).toMatch(/LLAMUX_SMOKE: '?1'?/);
  });
});
