// Where the native addon comes from, and which GPU backend packages join it (issue 28).
//
// The addon, in order:
//   1. LLAMUX_NATIVE_PATH (a specific build, e.g. the sanitizer build of `npm run test:asan`)
//   2. build/Release/llamux.node: a source build made for this copy (asked for with
//      LLAMUX_BUILD_FROM_SOURCE / LLAMUX_GPU, or made by the install step as the fallback)
//   3. the platform package @llamux/<platform>-<arch>, an optional dependency that npm, pnpm
//      and yarn install only where its os/cpu/libc fields match
//   4. prebuilds/<platform>-<arch>/ (a checkout's `npm run prebuild`, older tarballs)
// GPU backends come from opt-in packages (@llamux/linux-x64-vulkan, ...-cuda): a backend
// library each, loaded beside the addon's own once a child process has loaded it and
// listed its devices without crashing (a broken driver must cost a warning, not the process).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, dirname, join } from 'node:path';

/** The GPU backends a package may exist for, in the order they are tried. */
export const GPU_BACKENDS = ['cuda', 'vulkan'] as const;

let musl: boolean | undefined;
function isMusl(): boolean {
  if (process.platform !== 'linux') return false;
  // a process report is the one libc fact Node exposes; made once
  musl ??= !(process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header?.glibcVersionRuntime;
  return musl;
}

/** @llamux/linux-x64, @llamux/darwin-arm64, @llamux/linux-x64-musl, ... */
export function platformPackageName(): string {
  return `@llamux/${process.platform}-${process.arch}${isMusl() ? '-musl' : ''}`;
}

/** @llamux/linux-x64-vulkan, ... */
export function gpuPackageName(backend: string): string {
  return `${platformPackageName()}-${backend}`;
}

/** The folder of an installed package as `from` resolves it, or undefined. */
function packageDir(name: string, from: string[]): string | undefined {
  for (const base of from) {
    try {
      return dirname(createRequire(join(base, 'package.json')).resolve(`${name}/package.json`));
    } catch {
      // not installed where this base looks
    }
  }
  return undefined;
}

export interface AddonChoice {
  /** The .node file to load, or undefined when none was found. */
  file?: string;
  /** Where it came from. */
  source?: 'LLAMUX_NATIVE_PATH' | 'build' | 'platform-package' | 'prebuild';
  /** What was looked at, for the error message. */
  tried: string[];
}

/** Finds the addon for a llamux package folder (see the order above). */
export function locateAddon(packageRoot: string): AddonChoice {
  const tried: string[] = [];
  const forced = process.env.LLAMUX_NATIVE_PATH;
  if (forced) return { file: forced, source: 'LLAMUX_NATIVE_PATH', tried };
  const built = join(packageRoot, 'build', 'Release', 'llamux.node');
  if (existsSync(built)) return { file: built, source: 'build', tried };
  tried.push(`a source build in ${join(packageRoot, 'build', 'Release')}`);
  const name = platformPackageName();
  const dir = packageDir(name, [packageRoot]);
  if (dir && existsSync(join(dir, 'llamux.node'))) return { file: join(dir, 'llamux.node'), source: 'platform-package', tried };
  tried.push(dir ? `the platform package ${name} in ${dir} (it has no llamux.node)` : `the platform package ${name} (not installed: an optional dependency, skipped by --omit=optional, --no-optional or a lockfile from another platform)`);
  try {
    const nodeGypBuild = createRequire(join(packageRoot, 'package.json'))('node-gyp-build') as { resolve(dir: string): string };
    return { file: nodeGypBuild.resolve(packageRoot), source: 'prebuild', tried };
  } catch {
    tried.push(`a prebuilt binary in ${join(packageRoot, 'prebuilds')}`);
  }
  return { tried };
}

export interface GpuPackage {
  backend: string;
  name: string;
  dir: string;
  /** The backend library the package carries. */
  library: string;
  /** Whether the child-process check passed. */
  ok: boolean;
  /** Why not, when it did not. */
  reason?: string;
  /** The devices the check listed. */
  devices: string[];
}

/** The installed GPU backend packages (resolved from llamux's folder, then the app's). */
export function findGpuPackages(packageRoot: string): Array<Omit<GpuPackage, 'ok' | 'devices'>> {
  const found: Array<Omit<GpuPackage, 'ok' | 'devices'>> = [];
  for (const backend of GPU_BACKENDS) {
    const name = gpuPackageName(backend);
    const dir = packageDir(name, [packageRoot, process.cwd()]);
    if (!dir) continue;
    let library = '';
    try {
      const meta = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { llamux?: { library?: string } };
      library = meta.llamux?.library ? join(dir, meta.llamux.library) : '';
    } catch {
      // unreadable package.json: reported below
    }
    found.push({ backend, name, dir, library });
  }
  return found;
}

const PROBE_TIMEOUT_MS = 30_000;

/** Loads the addon with one GPU backend in a child process and lists its devices. A crash,
 * a hang or no device of that backend all say "do not use it". */
export function probeGpuPackage(addon: string, pkg: Omit<GpuPackage, 'ok' | 'devices'>): GpuPackage {
  if (!pkg.library || !existsSync(pkg.library)) return { ...pkg, ok: false, reason: `${pkg.name} has no backend library (package.json "llamux.library")`, devices: [] };
  const script =
    'const i = require(process.argv[1]).systemInfo();' +
    'process.stdout.write(JSON.stringify({ loaded: i.loadedBackends, devices: i.devices, error: i.backendError }));';
  const env = { ...process.env, LLAMUX_BACKEND_FILES: pkg.library };
  const r = spawnSync(process.execPath, ['-e', script, addon], { env, encoding: 'utf8', timeout: PROBE_TIMEOUT_MS, maxBuffer: 1 << 20 });
  const fail = (reason: string): GpuPackage => ({ ...pkg, ok: false, reason, devices: [] });
  if (r.error && (r.error as NodeJS.ErrnoException).code === 'ETIMEDOUT') return fail(`the check did not finish in ${PROBE_TIMEOUT_MS / 1000} s`);
  if (r.error) return fail(`the check could not start: ${r.error.message}`);
  if (r.signal) return fail(`the check process was killed by ${r.signal} while loading ${pkg.library} (a broken driver?)`);
  if (r.status !== 0) return fail(`the check process exited with code ${r.status}: ${lastLine(r.stderr)}`);
  let out: { loaded: string[]; devices: Array<{ name: string; type: string }>; error: string };
  try {
    out = JSON.parse(r.stdout) as typeof out;
  } catch {
    return fail(`the check printed no report: ${lastLine(r.stderr)}`);
  }
  if (out.error) return fail(out.error);
  const file = pkg.library.split(/[\\/]/).pop()!;
  if (!out.loaded.includes(file)) return fail(`ggml did not load ${pkg.library}: ${lastLine(r.stderr) || 'no reason given'}`);
  const devices = out.devices.filter((d) => d.type !== 'cpu' && !d.name.startsWith('RPC')).map((d) => d.name);
  if (devices.length === 0) return fail(`${pkg.library} loaded but found no device (no driver, or no GPU it supports)`);
  return { ...pkg, ok: true, devices };
}

function lastLine(text: string): string {
  return text.trim().split('\n').filter(Boolean).pop() ?? '';
}

/** The value LLAMUX_BACKEND_FILES gets for the GPU packages that passed their check. */
export function backendFilesValue(packages: GpuPackage[]): string {
  return packages.filter((p) => p.ok).map((p) => p.library).join(delimiter);
}
