// `npm run bench [-- --quick] [-- --suite engine,replay] [-- --threads N]` (`--suite correctness -- --url URL`: check that server): runs benchmark suites,
// prints a table per suite and writes JSON results under bench/results/.
import { runCacheBench } from './workloads/cache.js';
import { runEngineBench } from './workloads/engine.js';
import { runMarkersBench } from './workloads/markers.js';

const KNOWN = ['engine', 'attention', 'markers', 'cache', 'tools', 'replay', 'throughput', 'overhead', 'rpc', 'families', 'reasoning-replay', 'surface', 'embeddings', 'speculative', 'bounded', 'determinism', 'agent-traffic', 'correctness', 'multimodal'];
// Named only: `families` (every zoo architecture, builds llama-server on first use),
// `reasoning-replay` (the Qwen3.5 reasoning replay of issue 25), `surface`, `embeddings` and
// `speculative` (issue 27), `determinism` (issue 26), `agent-traffic` and `correctness` (issue 41)
// are not in the default run.
const NAMED_ONLY = new Set(['families', 'reasoning-replay', 'surface', 'embeddings', 'speculative', 'determinism', 'agent-traffic', 'correctness']);
const DEFAULT = KNOWN.filter((s) => !NAMED_ONLY.has(s));
const args = process.argv.slice(2);
const quick = args.includes('--quick');
const suiteArg = args.find((a) => a.startsWith('--suite='))?.slice('--suite='.length) ?? args[args.indexOf('--suite') + 1];
const suites = (suiteArg && !suiteArg.startsWith('--') ? suiteArg : DEFAULT.join(',')).split(',');
const threadsArg = args.find((a) => a.startsWith('--threads='))?.slice('--threads='.length) ?? (args.includes('--threads') ? args[args.indexOf('--threads') + 1] : undefined);
const threads = threadsArg !== undefined ? Number(threadsArg) : undefined;
if (threads !== undefined && !(Number.isInteger(threads) && threads > 0)) {
  console.error(`--threads expects a positive integer, got "${threadsArg}"`);
  process.exit(2);
}
// Options of every suite: --quick, and --threads N when given (each suite has its own default).
const common = { quick, ...(threads !== undefined ? { threads } : {}) };

const { describeSystem } = await import('../src/native/system-info.js');
console.log(`llamux bench on ${describeSystem()}`);
const started = Date.now();
for (const suite of suites) {
  const t0 = Date.now();
  console.log(`\n## ${suite}\n`);
  if (suite === 'engine') {
    console.log(await runEngineBench(common));
  } else if (suite === 'attention') {
    const { runAttentionBench } = await import('./workloads/attention.js');
    console.log(await runAttentionBench(common));
  } else if (suite === 'markers') {
    console.log(await runMarkersBench(common));
  } else if (suite === 'cache') {
    console.log(await runCacheBench(common));
  } else if (suite === 'tools') {
    const { runToolsBench } = await import('./tools.js');
    const r = await runToolsBench({ quick });
    console.log(typeof r === 'string' ? r : JSON.stringify(r, null, 2));
  } else if (suite === 'replay') {
    const { runReplayBench } = await import('./workloads/replay.js');
    console.log(await runReplayBench(common));
  } else if (suite === 'throughput') {
    const { runThroughputBench } = await import('./workloads/throughput.js');
    // --levels 16 or 4,16: only those numbers of conversations (default 1,4,8,16)
    const levelsArg = args.find((a) => a.startsWith('--levels='))?.slice('--levels='.length) ?? (args.includes('--levels') ? args[args.indexOf('--levels') + 1] : undefined);
    const levels = levelsArg?.split(',').map(Number);
    if (levels && !levels.every((n) => Number.isInteger(n) && n > 0)) {
      console.error(`--levels expects positive integers separated by commas, got "${levelsArg}"`);
      process.exit(2);
    }
    // --runs N: interleaved runs per level (default 3)
    const runsArg = args.find((a) => a.startsWith('--runs='))?.slice('--runs='.length) ?? (args.includes('--runs') ? args[args.indexOf('--runs') + 1] : undefined);
    const runs = runsArg !== undefined ? Number(runsArg) : undefined;
    if (runs !== undefined && !(Number.isInteger(runs) && runs > 0)) {
      console.error(`--runs expects a positive integer, got "${runsArg}"`);
      process.exit(2);
    }
    console.log(await runThroughputBench({ ...common, ...(levels ? { levels } : {}), ...(runs ? { runs } : {}) }));
  } else if (suite === 'overhead') {
    const { runOverheadBench } = await import('./workloads/overhead.js');
    console.log(await runOverheadBench(common));
  } else if (suite === 'families') {
    const { runFamiliesBench } = await import('./workloads/families.js');
    console.log(await runFamiliesBench(common));
  } else if (suite === 'reasoning-replay') {
    const { runReasoningReplayBench } = await import('./workloads/reasoning-replay.js');
    console.log(await runReasoningReplayBench(common));
  } else if (suite === 'surface') {
    const { runSurfaceBench } = await import('./workloads/surface.js');
    console.log(await runSurfaceBench(common));
  } else if (suite === 'embeddings') {
    const { runEmbeddingsBench } = await import('./workloads/embeddings.js');
    console.log(await runEmbeddingsBench(common));
  } else if (suite === 'speculative') {
    const { runSpeculativeBench } = await import('./workloads/speculative.js');
    console.log(await runSpeculativeBench(common));
  } else if (suite === 'determinism') {
    const { runDeterminismBench } = await import('./workloads/determinism.js');
    console.log(await runDeterminismBench(common));
  } else if (suite === 'bounded') {
    const { runBoundedBench } = await import('./workloads/bounded.js');
    console.log(await runBoundedBench(common));
  } else if (suite === 'agent-traffic') {
    const { runAgentTrafficBench } = await import('./workloads/agent-traffic.js');
    // --no-cache-control: the claude-code shape without its breakpoints (to compare)
    console.log(await runAgentTrafficBench({ ...common, ...(args.includes('--no-cache-control') ? { cacheControl: false } : {}) }));
  } else if (suite === 'correctness') {
    // `-- --url URL`: check that server instead of starting llamux and llama-server
    const url = args.find((a) => a.startsWith('--url='))?.slice('--url='.length) ?? (args.includes('--url') ? args[args.indexOf('--url') + 1] : undefined);
    const { runCorrectnessBench } = await import('./workloads/correctness.js');
    const r = await runCorrectnessBench({ ...common, ...(url ? { url } : {}) });
    console.log(r.text);
    // a failed check of llamux (or, with --url, of that server) fails the run
    if (r.failed) process.exitCode = 1;
  } else if (suite === 'multimodal') {
    const { runMultimodalBench } = await import('./workloads/multimodal.js');
    console.log(await runMultimodalBench(common));
  } else if (suite === 'rpc') {
    const { runRpcBench } = await import('./workloads/rpc.js');
    console.log(await runRpcBench(common));
  } else {
    console.error(`unknown suite "${suite}" (known: ${KNOWN.join(', ')})`);
    process.exitCode = 2;
    continue;
  }
  console.log(`(${suite}: ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
}
console.log(`\nbench finished in ${((Date.now() - started) / 1000).toFixed(1)} s (${quick ? 'quick' : 'full'} mode)`);
