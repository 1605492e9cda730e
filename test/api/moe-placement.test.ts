// cpuMoe / nCpuMoe on real loads (issue 38, item 4). This machine has no GPU, so the offload
// target is a `llamux rpc-server` on loopback: the offloaded layers' weights go to its RPC
// device, and with cpuMoe the expert tensors must stay in this process's CPU buffers, which
// llama.cpp's own placement (Model.placement(), read from each tensor's buffer) shows. Greedy
// output is the zoo model's built-in chain with and without the override, and the top
// log-probabilities are the same. On the plain CPU build: the options load, and gpuLayers
// 'auto' with injected device memory picks nCpuMoe and loads with it (llama.cpp's debug log
// names each tensor it overrode to a CPU buffer).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamuxError, loadModel, setLogger, type Model } from '../../src/index.js';
import { zooGreedyChain, type ZooModelDescription } from '../../src/gguf/index.js';
import { readGgufFile } from '../../src/gguf/reader.js';
import { modelSizesFromGguf } from '../../src/model/fit.js';
import { ONE_THREAD } from '../helpers/models.js';
import { startRpcServer, stopRpcServer, type RpcServerProcess } from '../helpers/rpc-servers.js';
import { zooModels } from '../helpers/zoo.js';

const STEPS = 8;
const EXPERT = /^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_exps\./;

let zoo: Record<'qwen35moe' | 'gpt-oss', ZooModelDescription>;
let server: RpcServerProcess;

beforeAll(async () => {
  setLogger('error');
  zoo = await zooModels(['qwen35moe', 'gpt-oss']);
  server = await startRpcServer();
}, 120_000);
afterAll(async () => {
  setLogger('warn');
  if (server) await stopRpcServer(server, 'SIGTERM');
});

const prompt = (d: ZooModelDescription): number[] => d.successors.set.slice(0, 3);

async function run(model: Model, d: ZooModelDescription) {
  const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 256, toolCallMarkers: false });
  try {
    const r = await ctx.complete({ prompt: prompt(d), temperature: 0, maxTokens: STEPS, emitTokenIds: true, logprobs: 3 });
    return { tokens: Array.from(r.tokens ?? []), logprobs: r.logprobs!.map((l) => l.top) };
  } finally {
    await ctx.dispose();
  }
}

async function withModel<T>(path: string, options: Parameters<typeof loadModel>[1], fn: (m: Model) => Promise<T>): Promise<T> {
  const m = await loadModel(path, options);
  try {
    return await fn(m);
  } finally {
    await m.dispose();
  }
}

describe('cpuMoe / nCpuMoe with layers offloaded to an RPC device', () => {
  for (const arch of ['qwen35moe', 'gpt-oss'] as const) {
    it(`${arch}: the experts stay in CPU buffers, everything else of the layers goes to the device, the output is unchanged`, async () => {
      const d = zoo[arch];
      const want = zooGreedyChain(d.successors, prompt(d).at(-1)!, STEPS);
      const rpc = { rpcServers: [server.endpoint], gpuLayers: -1 };
      let base = new Map<string, string>();
      const plain = await withModel(d.path, rpc, async (m) => {
        const p = m.placement();
        base = new Map(p.tensors.map((t) => [t.name, t.device]));
        const layerTensors = p.tensors.filter((t) => t.name.startsWith('blk.'));
        expect(layerTensors.length).toBeGreaterThan(0);
        // without cpuMoe the experts (and the layers' other weights, but for one whose op a
        // device may lack) are on the device
        for (const t of layerTensors.filter((t) => EXPERT.test(t.name))) expect(t.device, t.name).toMatch(/^RPC/);
        expect(layerTensors.filter((t) => /^RPC/.test(t.device)).length).toBeGreaterThan(layerTensors.length * 0.9);
        return run(m, d);
      });
      expect(plain.tokens).toEqual(want);

      const all = await withModel(d.path, { ...rpc, cpuMoe: true }, async (m) => {
        const p = m.placement();
        const experts = p.tensors.filter((t) => EXPERT.test(t.name));
        expect(experts.length).toBeGreaterThanOrEqual(3 * m.metadata.layers);
        for (const t of experts) expect(t.device, t.name).toBe('CPU');
        for (const t of p.tensors.filter((t) => !EXPERT.test(t.name))) expect(t.device, t.name).toBe(base.get(t.name));
        // what moved: the experts' bytes, now counted on the CPU
        const expertBytes = experts.reduce((a, t) => a + t.bytes, 0);
        const sizes = modelSizesFromGguf(await readGgufFile(d.path));
        expect(expertBytes).toBe(sizes.expertBytes!.reduce((a, b) => a + b, 0));
        return run(m, d);
      });
      expect(all.tokens).toEqual(want);
      expect(all.logprobs).toEqual(plain.logprobs);

      if (arch !== 'qwen35moe') return; // the first N layers: on one architecture (load time)
      const two = await withModel(d.path, { ...rpc, nCpuMoe: 2 }, async (m) => {
        for (const t of m.placement().tensors.filter((t) => EXPERT.test(t.name))) {
          const il = Number(EXPERT.exec(t.name)![1]);
          expect(t.device, t.name).toMatch(il < 2 ? /^CPU$/ : /^RPC/);
        }
        for (const t of m.placement().tensors.filter((t) => !EXPERT.test(t.name))) expect(t.device, t.name).toBe(base.get(t.name));
        return run(m, d);
      });
      expect(two.tokens).toEqual(want);
      expect(two.logprobs).toEqual(plain.logprobs);
    }, 120_000);
  }
});

describe('cpuMoe / nCpuMoe on the CPU build', () => {
  const ctx = 256;
  /** A CPU and a GPU with room for everything but the experts of layers 0 and 1. */
  async function devices(d: ZooModelDescription) {
    const sizes = modelSizesFromGguf(await readGgufFile(d.path));
    let free = sizes.computeBytes + sizes.outputComputeBytes + sizes.outputBytes;
    for (let il = 0; il < sizes.layers; il++) free += sizes.layerBytes[il]! + sizes.kvBytesPerToken[il]! * ctx - (il < 2 ? sizes.expertBytes![il]! : 0);
    return {
      sizes,
      devices: [
        { name: 'CPU', type: 'cpu' as const, memoryFree: 32 * 2 ** 30, memoryTotal: 32 * 2 ** 30 },
        { name: 'GPU0', type: 'gpu' as const, memoryFree: free, memoryTotal: free },
      ],
    };
  }

  /** The tensors llama.cpp's loader says it overrode to a CPU buffer (its debug log) while `fn` runs. */
  async function overridden<T>(fn: () => Promise<T>): Promise<{ names: string[]; out: T }> {
    const names = new Set<string>();
    setLogger('debug', (_level, message) => {
      const m = /^tensor (\S+) .*buffer type overridden to CPU/.exec(message.trim());
      if (m) names.add(m[1]!);
    });
    try {
      const out = await fn();
      return { names: [...names].sort(), out };
    } finally {
      setLogger('error');
    }
  }
  const expertNames = (d: ZooModelDescription, below: number) =>
    Array.from({ length: Math.min(below, d.nLayer) }, (_, il) => ['down', 'gate', 'up'].map((k) => `blk.${il}.ffn_${k}_exps.weight`)).flat().sort();

  it("gpuLayers 'auto' with injected device memory picks nCpuMoe 2 and loads with it; the output is the chain", async () => {
    const d = zoo.qwen35moe;
    const { sizes, devices: devs } = await devices(d);
    const { names, out } = await overridden(() => withModel(d.path, { fit: { devices: devs, contextSize: ctx, marginMb: 0 } }, async (m) => {
      expect(m.fit).toMatchObject({ mode: 'moe', nCpuMoe: 2, cpuMoe: false, gpuLayers: sizes.layers + 1, contextSize: ctx });
      // no GPU here: llama.cpp keeps every weight on the CPU whatever the plan offloads
      expect(Object.keys(m.placement().devices)).toEqual(['CPU']);
      return run(m, d);
    }));
    // but the plan's override reached the loader: the experts of layers 0 and 1, nothing else
    expect(names).toEqual(expertNames(d, 2));
    expect(out.tokens).toEqual(zooGreedyChain(d.successors, prompt(d).at(-1)!, STEPS));
  });

  it("keeps the load's own nCpuMoe (here beyond the layer count: all of them) and plans around it", async () => {
    const d = zoo.qwen35moe;
    const { sizes, devices: devs } = await devices(d);
    const { names, out } = await overridden(() => withModel(d.path, { nCpuMoe: 1000, fit: { devices: devs, contextSize: ctx, marginMb: 0 } }, async (m) => {
      expect(m.fit).toMatchObject({ mode: 'moe', cpuMoe: true, nCpuMoe: sizes.layers });
      expect(m.fit!.reasons.join('\n')).toMatch(/as the load asks/);
      return run(m, d);
    }));
    expect(names).toEqual(expertNames(d, d.nLayer));
    expect(out.tokens).toEqual(zooGreedyChain(d.successors, prompt(d).at(-1)!, STEPS));
  });

  it('refuses bad options with INVALID_ARGUMENT and keeps loading', async () => {
    const d = zoo.qwen35moe;
    for (const bad of [{ cpuMoe: true, nCpuMoe: 2 }, { nCpuMoe: -1 }, { nCpuMoe: 1.5 }, { cpuMoe: 'yes' }, { fit: { devices: [{ name: 'x', type: 'tpu', memoryFree: 1, memoryTotal: 1 }] } }]) {
      const e = await loadModel(d.path, bad as never).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(e, JSON.stringify(bad)).toBeInstanceOf(LlamuxError);
      expect((e as LlamuxError).code).toBe('INVALID_ARGUMENT');
    }
    await withModel(d.path, { vocabOnly: true, nCpuMoe: 1 }, async (m) => expect(m.vocab.size).toBeGreaterThan(0));
  });
});
