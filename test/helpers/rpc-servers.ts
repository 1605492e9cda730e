// Real `llamux rpc-server` processes on loopback for the RPC tests and benchmarks: free
// ports, started through the CLI, killed on teardown and, as a backstop, when the process
// running the tests exits.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { projectRoot } from './paths.js';

export interface RpcServerProcess {
  readonly endpoint: string;
  readonly port: number;
  readonly child: ChildProcess;
  /** What the process printed so far (stdout + stderr). */
  output(): string;
}

const live = new Set<ChildProcess>();
let exitHookAdded = false;

/** A port nothing listens on right now (the kernel's pick, released at once). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const addr = s.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      s.close(() => resolve(port));
    });
  });
}

/** Starts `llamux rpc-server --port <free> --threads <n>` and waits until it listens. */
export async function startRpcServer(options: { threads?: number; timeoutMs?: number; port?: number } = {}): Promise<RpcServerProcess> {
  if (!exitHookAdded) {
    exitHookAdded = true;
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
  for (let attempt = 0; ; attempt++) {
    const port = options.port ?? (await freePort());
    const child = spawn(process.execPath, ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), 'rpc-server', '--port', String(port), '--threads', String(options.threads ?? 1)], {
      cwd: projectRoot,
      env: { ...process.env, NODE_NO_WARNINGS: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    live.add(child);
    child.once('exit', () => live.delete(child));
    let out = '';
    const ready = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), options.timeoutMs ?? 30_000);
      const onData = (d: Buffer): void => {
        out += d.toString();
        if (out.includes('listening on')) {
          clearTimeout(timer);
          resolve(true);
        }
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
      child.once('exit', () => {
        clearTimeout(timer);
        resolve(false);
      });
    });
    if (ready) return { endpoint: `127.0.0.1:${port}`, port, child, output: () => out };
    child.kill('SIGKILL');
    // Another process took the port between freePort() and the bind: try another.
    if (options.port === undefined && attempt < 3 && /cannot listen/.test(out)) continue;
    throw new Error(`llamux rpc-server did not start on port ${port}:\n${out}`);
  }
}

/** Kills the process (SIGKILL by default) and waits until it is gone. */
export function stopRpcServer(s: RpcServerProcess, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  if (s.child.exitCode !== null || s.child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    s.child.once('exit', () => resolve());
    s.child.kill(signal);
  });
}
