// `npm run prebuild` writes prebuilds/<platform>-<arch>/: the addon and the shared libraries it
// loads (libllama/libggml, one CPU backend per ISA level), which must work as a folder of their
// own, wherever it is copied.
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot, tempDir, tinyModelPath } from '../helpers/paths.js';

const tuple = `${process.platform}-${process.arch}`;
const folder = join(projectRoot, 'prebuilds', tuple);

describe('npm run prebuild', () => {
  it('writes a prebuild folder that node-gyp-build loads with no build folder present', { timeout: 30 * 60_000 }, () => {
    // Builds the shipped CPU variants in build-prebuild/ (incremental after the first time): a
    // checkout's build/ has only the baseline and this CPU's best (LLAMUX_CPU_VARIANTS=host).
    execFileSync(process.execPath, [join(projectRoot, 'scripts', 'prebuild.mjs')], { cwd: projectRoot, stdio: 'pipe', maxBuffer: 512 * 1024 * 1024 });
    const files = readdirSync(folder);
    const addon = files.find((f) => f.endsWith('.node'));
    expect(addon).toBe(process.platform === 'linux' ? 'llamux.glibc.node' : 'llamux.node');
    expect(files.filter((f) => /^libggml-cpu-.+\.so$/.test(f)).sort()).toEqual(
      ['alderlake', 'haswell', 'icelake', 'sapphirerapids', 'skylakex', 'sse42', 'x64', 'zen4'].map((v) => `libggml-cpu-${v}.so`),
    );
    expect(files).toEqual(expect.arrayContaining(['libllamux-llama.so', 'libllamux-ggml.so', 'libllamux-ggml-base.so', 'llamux-build.json']));

    // A package folder (with a space in its path) holding only package.json and prebuilds/.
    const pkg = join(tempDir('prebuilt pkg'), 'with space');
    cpSync(folder, join(pkg, 'prebuilds', tuple), { recursive: true });
    writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'llamux' }));
    expect(existsSync(join(pkg, 'build'))).toBe(false);

    const script = `
      const ngb = require(${JSON.stringify(join(projectRoot, 'node_modules', 'node-gyp-build'))});
      const file = ngb.resolve(${JSON.stringify(pkg)});
      const b = ngb(${JSON.stringify(pkg)});
      b.setLogger(undefined, 99);
      const info = b.systemInfo();
      const flag = new Int32Array(1);
      b.Model.load(${JSON.stringify(tinyModelPath)}, { vocabOnly: true }, flag).then((m) => {
        console.log(JSON.stringify({ file, dir: info.backendDirectory, variant: info.cpuVariant, tokens: Array.from(m.tokenize('Hello world', false, false)) }));
      });
    `;
    const out = execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' });
    const result = JSON.parse(out.trim().split('\n').at(-1)!);
    expect(result.file).toBe(join(pkg, 'prebuilds', tuple, addon!));
    // the CPU backends come from the copied folder, not from the checkout's build
    expect(result.dir).toBe(join(pkg, 'prebuilds', tuple));
    expect(result.variant).not.toBe('');
    expect(result.tokens).toEqual([15043, 3186]);

    // The variant a checkout builds for this CPU at configure time (ggml's score, CMakeLists.txt)
    // is the one the loader picks among all eight at run time; the baseline is there too.
    const checkout = JSON.parse(readFileSync(join(projectRoot, 'build', 'Release', 'llamux-build.json'), 'utf8')) as { cpuVariants: string[] };
    expect(checkout.cpuVariants).toContain('x64');
    expect(checkout.cpuVariants).toContain(result.variant);
  });
});
