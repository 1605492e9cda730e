// llamux's server in a child process of its own, for what needs a process to kill: the
// correctness suite's `kill -9` and restart on the same disk tier. The parent passes the
// createServer options as JSON in argv[2]; the child prints `LISTENING <url>` once it answers.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export interface LlamuxProcess {
  url: string;
  child: ChildProcess;
  /** SIGKILL, then wait for the exit. */
  kill(): Promise<void>;
  /** SIGTERM (a clean close), then wait for the exit. */
  close(): Promise<void>;
}

const self = fileURLToPath(import.meta.url);

export function startLlamuxProcess(options: Record<string, unknown>): Promise<LlamuxProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', self, JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NODE_NO_WARNINGS: '1' } });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async (signal: NodeJS.Signals): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await exited;
  };
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`llamux did not start: ${stderr}`));
    }, 120_000);
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /LISTENING (\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1]!, child, kill: () => stop('SIGKILL'), close: () => stop('SIGTERM') });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`llamux exited with ${code}: ${stderr}`));
    });
  });
}

// The child: run the server until SIGTERM.
if (process.argv[1] === self) {
  const { createServer } = await import('../../src/server/index.js');
  const { setLogger } = await import('../../src/index.js');
  setLogger('silent');
  const server = await createServer({ port: 0, log: () => {}, ...(JSON.parse(process.argv[2]!) as Record<string, unknown>) } as Parameters<typeof createServer>[0]);
  process.stdout.write(`LISTENING ${server.url}\n`);
  process.once('SIGTERM', () => {
    void server.close().then(() => process.exit(0));
  });
}
