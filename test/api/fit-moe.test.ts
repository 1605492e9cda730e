// MoE expert placement in the fit planner (gpuLayers 'auto'): the zoo's MoE models (real
// tensor layouts of qwen35moe, gpt-oss, glm4moe) planned against injected device-memory
// figures. Each expected nCpuMoe / gpuLayers is computed here from the GGUF's own tensor byte
// sizes (this file's classification of the expert tensors), not from the planner's.
import { describe, expect, it } from 'vitest';
import { readGgufFile, type GgufFile } from '../../src/gguf/reader.js';
import { describePlan, modelSizesFromGguf, planFit, type FitDevice, type FitModelSizes } from '../../src/model/fit.js';
import { cpuMoeLayers, expertOverridePattern, isExpertTensor, numbersBelow } from '../../src/model/moe.js';
import { zooModels } from '../helpers/zoo.js';

const MOE = ['qwen35moe', 'gpt-oss', 'glm4moe'] as const;
const CTX = 256;
const cpu: FitDevice = { name: 'CPU', type: 'cpu', memoryFree: 64 * 2 ** 30, memoryTotal: 64 * 2 ** 30 };
const gpu = (free: number): FitDevice => ({ name: 'GPU0', type: 'gpu', memoryFree: free, memoryTotal: free });
const request = { contextSize: CTX, marginBytes: 0 };

/** Per layer: expert bytes and the rest, from the tensor list (names as llama-arch.cpp writes them). */
function split(g: GgufFile, layers: number): { experts: number[]; dense: number[] } {
  const experts = new Array<number>(layers).fill(0);
  const dense = new Array<number>(layers).fill(0);
  for (const t of g.tensors) {
    const m = /^blk\.(\d+)\.(.+)$/.exec(t.name);
    if (!m || Number(m[1]) >= layers) continue;
    const il = Number(m[1]);
    const base = m[2]!.split('.')[0]!;
    if (['ffn_up_exps', 'ffn_down_exps', 'ffn_gate_exps', 'ffn_gate_up_exps'].includes(base)) experts[il]! += t.byteSize;
    else dense[il]! += t.byteSize;
  }
  return { experts, dense };
}

/** Bytes the GPU needs with the head and the last `layers` layers, the experts of layers below `nCpuMoe` left out. */
function need(s: FitModelSizes, e: { experts: number[]; dense: number[] }, layers: number, nCpuMoe: number): number {
  let b = s.computeBytes + s.outputComputeBytes + s.outputBytes;
  for (let il = s.layers - layers; il < s.layers; il++) b += e.dense[il]! + (il < nCpuMoe ? 0 : e.experts[il]!) + s.kvBytesPerToken[il]! * CTX;
  return b;
}

// Read once for every test of the file.
let loaded: ReturnType<typeof readModels> | undefined;
const moeModels = () => (loaded ??= readModels());

async function readModels() {
  const zoo = await zooModels([...MOE, 'llama']);
  const out = [];
  for (const arch of MOE) {
    const g = await readGgufFile(zoo[arch].path);
    const sizes = modelSizesFromGguf(g);
    out.push({ arch, g, sizes, e: split(g, sizes.layers) });
  }
  return { out, dense: modelSizesFromGguf(await readGgufFile(zoo.llama.path)) };
}

describe('expert tensor patterns', () => {
  it('numbersBelow(n) matches exactly the layer numbers 0 .. n-1', () => {
    for (let n = 1; n <= 1200; n++) {
      const re = new RegExp(`^(?:${numbersBelow(n)})$`);
      for (let x = 0; x <= 1300; x++) {
        if (re.test(String(x)) !== x < n) throw new Error(`numbersBelow(${n}) on ${x}: ${re.test(String(x))}`);
      }
      expect(re.test('01')).toBe(false);
    }
    expect(() => numbersBelow(0)).toThrow(RangeError);
  });

  it('the override pattern takes the experts of the first N layers, with biases and scales, and nothing else', () => {
    const re = new RegExp(expertOverridePattern(12)!);
    for (const suffix of ['weight', 'bias', 'scale', 'input_scale']) {
      expect(re.test(`blk.11.ffn_down_exps.${suffix}`)).toBe(true);
      expect(re.test(`blk.0.ffn_gate_up_exps.${suffix}`)).toBe(true);
    }
    expect(re.test('blk.3.ffn_up_chexps.weight')).toBe(true);
    for (const name of ['blk.12.ffn_up_exps.weight', 'blk.110.ffn_up_exps.weight', 'blk.1.ffn_up_shexp.weight', 'blk.1.ffn_gate_inp.weight', 'blk.1.ffn_norm_exps.weight', 'blk.1.ffn_up.weight', 'blk.1.attn_q.weight']) {
      expect(re.test(name), name).toBe(false);
    }
    expect(expertOverridePattern(0)).toBeUndefined();
    expect(new RegExp(expertOverridePattern('all')!).test('blk.93.ffn_gate_exps.weight')).toBe(true);
    expect(isExpertTensor('blk.93.ffn_gate_exps.weight')).toBe(true);
    expect(isExpertTensor('blk.93.ffn_gate_shexp.weight')).toBe(false);
  });
});

describe('the load options as the plan sees them', () => {
  it('cpuMoe: all; nCpuMoe: N; cpuMoe: false alone: none moved, not even by the plan; neither: the plan chooses', () => {
    expect(cpuMoeLayers({ cpuMoe: true })).toBe('all');
    expect(cpuMoeLayers({ nCpuMoe: 3 })).toBe(3);
    expect(cpuMoeLayers({ cpuMoe: false, nCpuMoe: 3 })).toBe(3);
    expect(cpuMoeLayers({ cpuMoe: false })).toBe(0);
    expect(cpuMoeLayers({})).toBeUndefined();
  });
});

describe('planFit on the zoo MoE models', () => {
  it('reads each layer\'s expert bytes from the GGUF', async () => {
    const { out, dense } = await moeModels();
    for (const { arch, sizes, e } of out) {
      expect(sizes.expertBytes, arch).toEqual(e.experts);
      expect(e.experts.some((b) => b > 0), arch).toBe(true);
      sizes.layerBytes.forEach((b, il) => expect(b, `${arch} layer ${il}`).toBe(e.dense[il]! + e.experts[il]!));
    }
    expect(dense.expertBytes!.every((b) => b === 0)).toBe(true);
  });

  it('everything fits: all layers on the GPU, no expert moves', async () => {
    const { out } = await moeModels();
    for (const { arch, sizes, e } of out) {
      const p = planFit(sizes, [cpu, gpu(need(sizes, e, sizes.layers, 0))], request);
      expect(p, arch).toMatchObject({ mode: 'gpu', gpuLayers: sizes.layers + 1, nCpuMoe: 0, cpuMoe: false, contextSize: CTX });
      expect(p.experts, arch).toMatchObject({ layersInRam: 0, bytesInRam: 0, bytesOnGpu: e.experts.reduce((a, b) => a + b, 0) });
      expect(p.warning).toBeUndefined();
    }
  });

  it('the dense part fits, the experts do not: the smallest nCpuMoe that fits, for every N', async () => {
    const { out } = await moeModels();
    let cases = 0;
    for (const { arch, sizes, e } of out) {
      for (let n = 1; n <= sizes.layers; n++) {
        if (e.experts[n - 1] === 0) continue; // a dense layer: n experts in RAM are n-1's
        // all but half of layer n-1's experts fit: the experts of layers 0 .. n-1 must stay in RAM
        const free = need(sizes, e, sizes.layers, n) + Math.floor(e.experts[n - 1]! / 2);
        const p = planFit(sizes, [cpu, gpu(free)], request);
        const inRam = e.experts.slice(0, n).reduce((a, b) => a + b, 0);
        expect(p, `${arch} n=${n}`).toMatchObject({ mode: 'moe', gpuLayers: sizes.layers + 1, nCpuMoe: n, cpuMoe: n === sizes.layers, contextSize: CTX });
        expect(p.experts, `${arch} n=${n}`).toMatchObject({ bytesInRam: inRam, layersInRam: e.experts.slice(0, n).filter((b) => b > 0).length });
        expect(p.devices[0]!.bytes).toBeLessThanOrEqual(free);
        expect(p.hostBytes).toBe(sizes.hostBytes + inRam);
        expect(p.warning).toMatch(/experts do not all fit/);
        // exactly enough for the experts of layers n.. (n-1's do not fit): still n
        expect(planFit(sizes, [cpu, gpu(need(sizes, e, sizes.layers, n))], request).nCpuMoe, `${arch} n=${n} exact`).toBe(n);
        cases++;
      }
    }
    expect(cases).toBeGreaterThanOrEqual(6);
  });

  it('not even the dense part fits: fewer gpuLayers, every layer\'s experts in RAM', async () => {
    const { out } = await moeModels();
    for (const { arch, sizes, e } of out) {
      for (let k = 0; k < sizes.layers; k++) {
        // the head and the dense part of the last k layers fit, plus half of the next one
        const free = need(sizes, e, k, sizes.layers) + Math.floor(e.dense[sizes.layers - k - 1]! / 2);
        const p = planFit(sizes, [cpu, gpu(free)], request);
        expect(p, `${arch} k=${k}`).toMatchObject({ mode: 'split', gpuLayers: k + 1, cpuMoe: true, nCpuMoe: sizes.layers });
        expect(p.reasons.join('\n')).toMatch(/even with every layer's experts in system RAM/);
      }
      // not even the head: CPU, nothing moved
      const p = planFit(sizes, [cpu, gpu(need(sizes, e, 0, sizes.layers) - 1)], request);
      expect(p, arch).toMatchObject({ mode: 'cpu', gpuLayers: 0, nCpuMoe: 0, cpuMoe: false });
    }
  });

  it('a dense model never gets an expert override', async () => {
    const { dense } = await moeModels();
    const small = planFit(dense, [cpu, gpu(dense.outputBytes + dense.computeBytes + dense.outputComputeBytes + dense.layerBytes[0]! * 2)], request);
    expect(small.mode).toBe('split');
    expect(small).toMatchObject({ nCpuMoe: 0, cpuMoe: false });
    expect(small.experts).toBeUndefined();
  });

  it('keeps the load\'s own cpuMoe / nCpuMoe and plans around them', async () => {
    const { out } = await moeModels();
    const { sizes, e } = out[0]!;
    const roomy = planFit(sizes, [cpu, gpu(need(sizes, e, sizes.layers, 0))], { ...request, nCpuMoe: 'all' });
    expect(roomy).toMatchObject({ mode: 'moe', nCpuMoe: sizes.layers, cpuMoe: true, gpuLayers: sizes.layers + 1 });
    expect(roomy.reasons.join('\n')).toMatch(/as the load asks/);
    const two = planFit(sizes, [cpu, gpu(need(sizes, e, sizes.layers, 0))], { ...request, nCpuMoe: 2 });
    expect(two).toMatchObject({ mode: 'moe', nCpuMoe: 2, cpuMoe: false });
    // asked for none: the plan may not move experts, so it offloads fewer layers instead
    const none = planFit(sizes, [cpu, gpu(need(sizes, e, sizes.layers, 1))], { ...request, nCpuMoe: 0 });
    expect(none).toMatchObject({ mode: 'split', nCpuMoe: 0 });
    expect(none.gpuLayers).toBeLessThan(sizes.layers + 1);
  });

  it('describes the plan: layers on the device, experts in RAM, bytes each', async () => {
    const { out } = await moeModels();
    const { sizes, e } = out[0]!;
    const lines = describePlan(planFit(sizes, [cpu, gpu(need(sizes, e, sizes.layers, 2))], request));
    const text = lines.join('\n');
    expect(lines[0]).toBe(`plan: all layers on the GPU, the experts of the first 2 layers in system RAM, ${sizes.layers + 1} of ${sizes.layers + 1} layers offloaded, context ${CTX} tokens`);
    expect(text).toMatch(new RegExp(`GPU0: ${sizes.layers + 1} layers, about [\\d,]+ MiB`));
    expect(text).toContain(`${Math.round((e.experts[0]! + e.experts[1]!) / 1024)} KiB (of 2 offloaded layers) in system RAM`);
    expect(text).toContain('load options: nCpuMoe: 2');
  });
});
