import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot, tempDir, tinyModelPath } from '../helpers/paths.js';

const tuple = `${process.platform}-${process.arch}`;
const prebuilt = join(projectRoot, 'prebuilds', tuple, 'llamux.node');

describe('npm run prebuild', () => {
  it('writes a prebuild that node-gyp-build loads with no build folder present', { timeout: 20 * 60_000 }, () => {
    if (!existsSync(prebuilt)) {
      // A cold build prints over a megabyte of compiler output: keep it all (failures show it).
      execFileSync(process.execPath, [join(projectRoot, 'scripts', 'prebuild.mjs')], { cwd: projectRoot, stdio: 'pipe', maxBuffer: 512 * 1024 * 1024 });
    }
    expect(existsSync(prebuilt)).toBe(true);

    // A package folder with only package.json and prebuilds/: no build/, no sources.
    const pkg = tempDir('prebuilt-pkg');
    mkdirSync(join(pkg, 'prebuilds', tuple), { recursive: true });
    copyFileSync(prebuilt, join(pkg, 'prebuilds', tuple, 'llamux.node'));
    writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'llamux' }));
    expect(existsSync(join(pkg, 'build'))).toBe(false);

    const script = `
      const ngb = require(${JSON.stringify(join(projectRoot, 'node_modules', 'node-gyp-build'))});
      const file = ngb.resolve(${JSON.stringify(pkg)});
      const b = ngb(${JSON.stringify(pkg)});
      b.setLogger(undefined, 99);
      const flag = new Int32Array(1);
      b.Model.load(${JSON.stringify(tinyModelPath)}, { vocabOnly: true }, flag).then((m) => {
        console.log(JSON.stringify({ file, tokens: Array.from(m.tokenize('Hello world', false, false)) }));
      });
    `;
    const out = execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' });
    const result = JSON.parse(out.trim().split('\n').at(-1)!);
    expect(result.file).toBe(join(pkg, 'prebuilds', tuple, 'llamux.node'));
    expect(result.tokens).toEqual([15043, 3186]);
  });
});
