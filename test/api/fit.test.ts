// gpuLayers: 'auto'. The planner is a pure function of the model's sizes and a device list, so
// its cases run on synthetic device lists here; the load path runs on the real CPU backend of
// this (GPU-less) machine: 'auto' must give 0 GPU layers and say why.
import { describe, expect, it } from 'vitest';
import { describePlan, modelSizesFromGguf, planFit, type FitDevice, type FitModelSizes } from '../../src/model/fit.js';
import { readGgufFile } from '../../src/gguf/reader.js';
import { loadModel, planForFile, systemInfo } from '../../src/index.js';
import { setLogger } from '../../src/logger.js';
import { testModel } from '../helpers/models.js';
import { zooModels } from '../helpers/zoo.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

/** A 32-layer model: 200 MiB a layer, a 500 MiB head, 128 KiB of KV per token (32 layers × 4 KiB). */
function model(over: Partial<FitModelSizes> = {}): FitModelSizes {
  return {
    architecture: 'llama',
    layers: 32,
    layerBytes: new Array(32).fill(200 * MiB),
    outputBytes: 500 * MiB,
    hostBytes: 500 * MiB,
    kvBytesPerToken: new Array(32).fill(4096),
    computeBytes: 100 * MiB,
    outputComputeBytes: 300 * MiB,
    trainingContextSize: 32768,
    ...over,
  };
}

const cpu: FitDevice = { name: 'CPU', type: 'cpu', memoryFree: 64 * GiB, memoryTotal: 128 * GiB };
const gpu = (name: string, free: number, total = free): FitDevice => ({ name, type: 'gpu', memoryFree: free, memoryTotal: total });
const margin = { marginBytes: 1 * GiB };

describe('planFit', () => {
  it('runs on the CPU, and says why, when there is no GPU', () => {
    const p = planFit(model(), [cpu]);
    expect(p.mode).toBe('cpu');
    expect(p.gpuLayers).toBe(0);
    expect(p.tensorSplit).toEqual([]);
    expect(p.contextSize).toBe(4096);
    expect(p.reasons.join('\n')).toMatch(/no GPU device/);
    expect(p.warning).toBeUndefined();
  });

  it('offloads every layer and the head when they fit', () => {
    // weights 32*200 + 500 = 6900 MiB, KV 4096 tokens * 128 KiB = 512 MiB, compute 400 MiB, margin 1 GiB
    const p = planFit(model(), [cpu, gpu('CUDA0', 24 * GiB)], { contextSize: 4096, ...margin });
    expect(p).toMatchObject({ mode: 'gpu', gpuLayers: 33, totalLayers: 33, contextSize: 4096, tensorSplit: [33] });
    expect(p.devices[0]!.bytes).toBe(6900 * MiB + 512 * MiB + 400 * MiB);
    expect(p.reasons.join('\n')).toMatch(/all 33 layers and a 4096-token context fit/);
  });

  it('reduces the context (to a multiple of 256, not below the floor) before leaving layers on the CPU', () => {
    // 6900 + 400 + 1024 margin = 8324 MiB fixed; 9 GiB = 9216 MiB leaves 892 MiB for KV: 7136 tokens, 6912 rounded.
    const p = planFit(model(), [cpu, gpu('CUDA0', 9 * GiB)], { contextSize: 32768, ...margin });
    expect(p.mode).toBe('gpu');
    expect(p.gpuLayers).toBe(33);
    expect(p.contextSize).toBe(6912);
    expect(p.contextFloor).toBe(4096);
    expect(p.reasons.join('\n')).toMatch(/context reduced from 32768 to 6912/);
  });

  it('runs split at the floor, with a warning, when even the floor does not fit every layer', () => {
    // 4 GiB - 1 GiB margin = 3072 MiB: head 500 + 300 + compute 100, then 200 MiB + 16 MiB KV (4096 tokens) a layer
    const p = planFit(model(), [cpu, gpu('CUDA0', 4 * GiB)], { contextSize: 16384, ...margin });
    expect(p.mode).toBe('split');
    expect(p.contextSize).toBe(4096);
    expect(p.gpuLayers).toBe(1 + Math.floor((3072 - 900) / 216));
    expect(p.warning).toMatch(/does not fit in GPU memory: 11 of 33 layers on the GPU, 22 on the CPU/);
    expect(p.hostBytes).toBe(500 * MiB + 22 * (200 * MiB + 4096 * 4096));
  });

  it('keeps the requested context when it is below the floor', () => {
    const p = planFit(model(), [cpu, gpu('CUDA0', 4 * GiB)], { contextSize: 1024, ...margin });
    expect(p.contextFloor).toBe(1024);
    expect(p.contextSize).toBe(1024);
    expect(p.mode).toBe('split');
  });

  it('runs on the CPU with a warning when not even the head fits', () => {
    const p = planFit(model(), [cpu, gpu('CUDA0', 1536 * MiB)], margin);
    expect(p.mode).toBe('cpu');
    expect(p.gpuLayers).toBe(0);
    expect(p.warning).toMatch(/running on the CPU/);
  });

  it('fills several GPUs back to front and gives the split per device', () => {
    const p = planFit(model(), [cpu, gpu('CUDA0', 6 * GiB), gpu('CUDA1', 5 * GiB)], { contextSize: 4096, ...margin });
    expect(p.mode).toBe('gpu');
    expect(p.tensorSplit.reduce((a, b) => a + b, 0)).toBe(33);
    // the last GPU holds the head and as many layers as fit; the first takes the rest
    const lastCount = 1 + Math.floor((4096 - 900) / 216);
    expect(p.tensorSplit).toEqual([33 - lastCount, lastCount]);
    expect(p.devices.map((d) => d.name)).toEqual(['CUDA0', 'CUDA1']);
  });

  it('skips GPUs that report no memory', () => {
    const p = planFit(model(), [cpu, gpu('Vulkan0', 0, 0)]);
    expect(p.mode).toBe('cpu');
    expect(p.reasons.join('\n')).toMatch(/Vulkan0 reports no memory/);
  });

  it('warns when the host part does not fit in free RAM', () => {
    const p = planFit(model(), [{ ...cpu, memoryFree: 2 * GiB }]);
    expect(p.warning).toMatch(/of RAM is free/);
  });

  it('scales the KV with a quantized cache type', () => {
    const f16 = planFit(model(), [cpu, gpu('CUDA0', 9 * GiB)], { contextSize: 32768, ...margin });
    const q8 = planFit(model(), [cpu, gpu('CUDA0', 9 * GiB)], { contextSize: 32768, kvScale: 0.53125, ...margin });
    expect(q8.contextSize).toBeGreaterThan(f16.contextSize);
  });

  it('describes the plan as text', () => {
    const lines = describePlan(planFit(model(), [cpu, gpu('CUDA0', 4 * GiB)], margin)).join('\n');
    expect(lines).toMatch(/^plan: split between GPU and CPU, 11 of 33 layers offloaded, context 4096 tokens/);
    expect(lines).toMatch(/CUDA0: 11 layers/);
    expect(lines).toMatch(/warning:/);
  });
});

describe('gpuLayers: auto on this machine', () => {
  const gpus = systemInfo().devices.filter((d) => d.type === 'gpu' || d.type === 'igpu');

  it('reads layer and KV sizes from the GGUF header', async () => {
    const path = testModel('single-marker').path;
    const sizes = modelSizesFromGguf(await readGgufFile(path));
    expect(sizes.layers).toBeGreaterThan(0);
    expect(sizes.layerBytes).toHaveLength(sizes.layers);
    expect(sizes.layerBytes.every((b) => b > 0)).toBe(true);
    expect(sizes.outputBytes).toBeGreaterThan(0);
    expect(sizes.kvBytesPerToken.every((b) => b > 0)).toBe(true);
  });

  it('header-derived weights equal llama.cpp\'s model size on several architectures (dense, SWA, MoE, hybrid)', async () => {
    const zoo = await zooModels(['llama', 'gemma4', 'gpt-oss', 'granitehybrid']);
    setLogger('error');
    try {
      for (const [arch, z] of Object.entries(zoo)) {
        const gguf = await readGgufFile(z.path);
        const sizes = modelSizesFromGguf(gguf);
        const model = await loadModel(z.path, { gpuLayers: 0 });
        try {
          // Tied embeddings count twice in the plan (llama.cpp loads them again as the head), once in the file.
          const tied = gguf.tensors.every((t) => t.name !== 'output.weight');
          const embd = gguf.tensors.find((t) => t.name === 'token_embd.weight')?.byteSize ?? 0;
          const fromHeader = sizes.layerBytes.reduce((a, b) => a + b, 0) + sizes.hostBytes + sizes.outputBytes - (tied ? embd : 0);
          expect(sizes.layers, arch).toBe(model.metadata.layers);
          expect(fromHeader, arch).toBe(model.metadata.sizeBytes);
          expect(sizes.kvBytesPerToken.some((b) => b > 0), arch).toBe(true);
        } finally {
          await model.dispose();
        }
      }
    } finally {
      setLogger('warn');
    }
  });

  it.runIf(gpus.length === 0)('loads with 0 GPU layers and says why (no GPU here)', async () => {
    const lines: string[] = [];
    setLogger('warn', (_l, m) => lines.push(m));
    try {
      const model = await loadModel(testModel('single-marker').path);
      try {
        expect(model.fit).toBeDefined();
        expect(model.fit!.mode).toBe('cpu');
        expect(model.fit!.gpuLayers).toBe(0);
        expect(model.fit!.reasons.join('\n')).toMatch(/no GPU device/);
        const ctx = await model.createContext({ threads: 1, batchThreads: 1 });
        await ctx.dispose();
      } finally {
        await model.dispose();
      }
      expect(lines.filter((l) => l.startsWith('llamux:'))).toEqual([]);
    } finally {
      setLogger('warn');
    }
  });

  it('has no plan with an explicit gpuLayers', async () => {
    const model = await loadModel(testModel('single-marker').path, { gpuLayers: 0 });
    try {
      expect(model.fit).toBeUndefined();
    } finally {
      await model.dispose();
    }
  });

  it('plans for a file without loading it', async () => {
    const p = await planForFile(testModel('single-marker').path, { contextSize: 2048 });
    expect(p?.requestedContextSize).toBe(2048);
    expect(await planForFile('/nonexistent.gguf')).toBeUndefined();
  });
});
