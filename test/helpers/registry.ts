// A private npm registry on loopback for the package tests (issue 28): verdaccio (a
// devDependency) with temporary storage and no uplinks, so an install resolves from what
// was published to it and nothing else, and never reaches the internet.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { projectRoot } from './paths.js';

export interface Registry {
  url: string;
  /** npm configuration for every npm command that talks to this registry (user config, cache). */
  env: NodeJS.ProcessEnv;
  stop(): void;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

const USER = 'llamux-test';
const PASSWORD = 'loopback-only';

/** Starts verdaccio in `dir` and waits until it answers. */
export async function startRegistry(dir: string): Promise<Registry> {
  mkdirSync(join(dir, 'storage'), { recursive: true });
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/`;
  // htpasswd's {SHA} form: one known account that may publish; everyone may read.
  const sha = createHash('sha1').update(PASSWORD).digest('base64');
  writeFileSync(join(dir, 'htpasswd'), `${USER}:{SHA}${sha}:autocreated ${new Date().toISOString()}\n`);
  writeFileSync(
    join(dir, 'config.yaml'),
    [
      `storage: ${join(dir, 'storage')}`,
      'auth:',
      '  htpasswd:',
      `    file: ${join(dir, 'htpasswd')}`,
      '    max_users: -1',
      'uplinks: {}',
      'packages:',
      "  '**':",
      '    access: $all',
      '    publish: $authenticated',
      'web:',
      '  enable: false',
      'max_body_size: 200mb',
      'log: { type: stdout, format: pretty, level: warn }',
      '',
    ].join('\n'),
  );
  const auth = Buffer.from(`${USER}:${PASSWORD}`).toString('base64');
  const npmrc = join(dir, 'npmrc');
  writeFileSync(npmrc, `registry=${url}\n//127.0.0.1:${port}/:_auth=${auth}\naudit=false\nfund=false\nupdate-notifier=false\n`);
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    npm_config_userconfig: npmrc,
    npm_config_registry: url,
    npm_config_cache: join(dir, 'npm-cache'),
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
  };
  const bin = join(projectRoot, 'node_modules', 'verdaccio', 'bin', 'verdaccio');
  const child: ChildProcess = spawn(process.execPath, [bin, '--config', join(dir, 'config.yaml'), '--listen', `127.0.0.1:${port}`], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout!.on('data', (d: Buffer) => (log += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  const stop = () => {
    if (child.exitCode === null) child.kill('SIGKILL');
  };
  process.once('exit', stop);
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`verdaccio exited (${child.exitCode}):\n${log}`);
    try {
      const r = await fetch(`${url}-/ping`);
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      stop();
      throw new Error(`verdaccio did not answer on ${url} within 60 s:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return { url, env, stop };
}

/** Publishes llamux's production dependencies (the exact versions the checkout installed)
 * so that an app's install finds them here. One `npm pack` of the installed folders, then
 * one publish request per tarball (what `npm publish` sends). */
export async function publishDependencies(registry: Registry, scratch: string): Promise<number> {
  const ls = spawnSync('npm', ['ls', '--omit=dev', '--omit=peer', '--all', '--parseable'], { cwd: projectRoot, encoding: 'utf8', maxBuffer: 1 << 26 });
  const dirs = ls.stdout.split('\n').filter((d) => d.includes('node_modules'));
  const seen = new Map<string, string>();
  for (const d of dirs) {
    const { name, version } = JSON.parse(readFileSync(join(d, 'package.json'), 'utf8')) as { name: string; version: string };
    if (!seen.has(`${name}@${version}`)) seen.set(`${name}@${version}`, d);
  }
  mkdirSync(scratch, { recursive: true });
  const packed = spawnSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', scratch, ...seen.values()], { cwd: scratch, encoding: 'utf8', maxBuffer: 1 << 26 });
  if (packed.status !== 0) throw new Error(`npm pack of the dependencies failed:\n${packed.stderr.slice(-4000)}`);
  const infos = JSON.parse(packed.stdout) as Array<{ name: string; version: string; filename: string; integrity: string; shasum: string }>;
  for (const info of infos) {
    const dir = seen.get(`${info.name}@${info.version}`)!;
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Record<string, unknown>;
    const data = readFileSync(join(scratch, info.filename));
    const file = `${info.name.replace(/^@[^/]+\//, '')}-${info.version}.tgz`;
    const doc = {
      _id: info.name,
      name: info.name,
      'dist-tags': { latest: info.version },
      versions: {
        [info.version]: {
          ...manifest,
          _id: `${info.name}@${info.version}`,
          dist: { integrity: info.integrity, shasum: info.shasum, tarball: `${registry.url}${info.name}/-/${file}` },
        },
      },
      _attachments: { [file]: { content_type: 'application/octet-stream', data: data.toString('base64'), length: data.length } },
    };
    const auth = Buffer.from(`${USER}:${PASSWORD}`).toString('base64');
    const r = await fetch(`${registry.url}${info.name.replace('/', '%2f')}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', authorization: `Basic ${auth}` },
      body: JSON.stringify(doc),
    });
    if (!r.ok) throw new Error(`publishing ${info.name}@${info.version} to the test registry failed: ${r.status} ${await r.text()}`);
  }
  return infos.length;
}

export interface PackedPackage {
  name: string;
  tarball: string;
  size: number;
  unpackedSize: number;
}

/** scripts/platform-packages.mjs into `work`/packages (extra arguments: `--gpu vulkan=...`),
 * a registry in `work`/registry with llamux's dependencies, then every package published with
 * `npm publish`: the platform and GPU packages first, llamux last (as a release does). */
export async function registryWithLlamux(work: string, args: string[] = []): Promise<{ registry: Registry; packages: PackedPackage[] }> {
  const built = spawnSync(process.execPath, [join(projectRoot, 'scripts', 'platform-packages.mjs'), '--out', join(work, 'packages'), ...args], { cwd: projectRoot, encoding: 'utf8', maxBuffer: 1 << 28 });
  if (built.status !== 0) throw new Error(`scripts/platform-packages.mjs failed (${built.status ?? built.signal}):\n${built.stderr.slice(-4000)}`);
  const packages = (JSON.parse(built.stdout.trim().split('\n').pop()!) as { packages: PackedPackage[] }).packages;
  for (const p of packages) console.log(`llamux registry: ${p.name}: ${(p.size / 1e6).toFixed(1)} MB packed, ${(p.unpackedSize / 1e6).toFixed(1)} MB unpacked`);
  const registry = await startRegistry(join(work, 'registry'));
  const n = await publishDependencies(registry, join(work, 'deps'));
  console.log(`llamux registry: ${n} dependency tarballs published to ${registry.url}`);
  for (const p of [...packages.filter((p) => p.name !== 'llamux'), ...packages.filter((p) => p.name === 'llamux')]) {
    const r = spawnSync('npm', ['publish', p.tarball, '--registry', registry.url, '--ignore-scripts'], { cwd: work, env: registry.env, encoding: 'utf8' });
    if (r.status !== 0) {
      registry.stop();
      throw new Error(`npm publish ${p.name} failed:\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-4000)}`);
    }
  }
  return { registry, packages };
}
