// RPC overhead (issue 17): the same model and workload loaded locally and split across two
// `llamux rpc-server` processes on loopback. Loopback has no network to speak of, so the gap is
// the protocol's cost (graph serialization, one round trip per split per decode, activations
// copied between processes) plus the servers' own thread pools, not a network's.
import { loadModel, setLogger } from '../../src/index.js';
import { startRpcServer, stopRpcServer, type RpcServerProcess } from '../../test/helpers/rpc-servers.js';
import { llamuxSingle } from '../drivers/llamux.js';
import { ensureBenchModel, type BenchModelName } from '../models.js';
import { progress, progressDone, table, writeResult, type Row } from '../report.js';
import { fmtSpread, ratio, repeat } from '../stats.js';

export interface RpcBenchOptions {
  quick?: boolean;
  threads?: number;
  model?: BenchModelName;
}

export async function runRpcBench(opts: RpcBenchOptions = {}): Promise<string> {
  // One thread per process by default: all three processes share this machine's cores, and a
  // server waiting for its turn must not spin worker threads on the cores of the one computing
  // (a ggml thread pool spins between graphs). On separate machines give each its own cores.
  const threads = opts.threads ?? 1;
  const name: BenchModelName = opts.model ?? (opts.quick ? 'tiny-random' : '250m-q8_0');
  const promptTokens = opts.quick ? 64 : 256;
  const genTokens = opts.quick ? 32 : 128;
  const reps = opts.quick ? 1 : 3;
  setLogger('silent');
  progress(`rpc: preparing ${name}`);
  const bm = await ensureBenchModel(name);

  progress('rpc: local');
  const localModel = await loadModel(bm.path);
  const local = await repeat(reps, async (i) => {
    progress(`rpc: local (${i + 1}/${reps})`);
    const r = await llamuxSingle(localModel, promptTokens, genTokens, threads);
    return { prefill: r.prefillTokensPerSec, decode: r.decodeTokensPerSec };
  });
  await localModel.dispose();

  // Each server may use every thread: the layers run one server after the other.
  const servers: RpcServerProcess[] = [];
  let split: Awaited<typeof local>;
  let loadMs = 0;
  try {
    progress('rpc: starting two llamux rpc-server processes');
    servers.push(await startRpcServer({ threads }), await startRpcServer({ threads }));
    const t0 = performance.now();
    const rpcModel = await loadModel(bm.path, { rpcServers: servers.map((s) => s.endpoint) });
    loadMs = performance.now() - t0;
    split = await repeat(reps, async (i) => {
      progress(`rpc: split across 2 rpc-servers (${i + 1}/${reps})`);
      const r = await llamuxSingle(rpcModel, promptTokens, genTokens, threads);
      return { prefill: r.prefillTokensPerSec, decode: r.decodeTokensPerSec };
    });
    await rpcModel.dispose();
  } finally {
    await Promise.all(servers.map((s) => stopRpcServer(s, 'SIGTERM')));
  }
  progressDone();
  const rows: Row[] = [
    { placement: 'local (CPU)', 'prefill tok/s': fmtSpread(local.prefill), 'decode tok/s': fmtSpread(local.decode), 'prefill vs local': '1.00x', 'decode vs local': '1.00x' },
    {
      placement: '2 rpc-servers, loopback',
      'prefill tok/s': fmtSpread(split.prefill),
      'decode tok/s': fmtSpread(split.decode),
      'prefill vs local': ratio(split.prefill, local.prefill),
      'decode vs local': ratio(split.decode, local.decode),
    },
  ];
  const out: string[] = [];
  out.push(
    table(
      `rpc: local vs split across two loopback rpc-servers (${bm.description}; ${threads} thread${threads > 1 ? 's' : ''} per process; ${promptTokens}-token prompt, ${genTokens} tokens decoded; median (min–max) of ${reps})`,
      rows,
    ),
  );
  out.push(`split model load: ${Math.round(loadMs)} ms (weights sent to the servers over loopback)`);
  const file = writeResult('rpc', {
    mode: opts.quick ? 'quick' : 'full',
    model: { name, description: bm.description, sizeBytes: bm.sizeBytes },
    settings: { threads, promptTokens, genTokens, reps, servers: 2 },
    local,
    split,
    splitLoadMs: loadMs,
  });
  out.push(`results: ${file}`);
  return out.join('\n');
}
