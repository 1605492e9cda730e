// gpuLayers: 'auto' — how many layers (and how large a context) fit in the devices' free memory.
//
// A pure planner: the model's sizes come from its GGUF header (per-layer weight bytes from the
// tensor infos, KV bytes per token from the hyper-parameters), the devices' free memory from
// ggml (`ggml_backend_dev_memory`, through systemInfo()). llama.cpp's common/fit.cpp is the
// reference for the facts used here (not its code):
// - llama.cpp offloads the *last* n_gpu_layers of n_layer + 1 "layers", the extra one being the
//   output head (output.weight, or the token embeddings again when they are tied, plus
//   output_norm); the input embeddings always stay on the host.
// - Offloaded layers go to the GPUs in device order, split by `tensor_split`; whole layers only
//   (the output layer is never partial).
// - Each device keeps a free-memory margin (llama.cpp's default 1 GiB) for buffers it cannot
//   estimate; the context is not reduced below a floor (llama.cpp's default 4096 tokens), and a
//   reduced context is rounded down to a multiple of 256 (CUDA's KV padding).
// - Devices that report 0 free and 0 total memory are not planned on.
// - A MoE layer's expert tensors can stay in system RAM while the rest of the layer is offloaded
//   (tensor_buft_overrides, src/model/moe.ts): `nCpuMoe` moves the experts of the first N layers.
//   When every layer fits only without some experts, the plan keeps the experts of the fewest
//   first layers in RAM that lets all of them fit; when not even the layers without their
//   experts fit, it offloads fewer layers, with every layer's experts in RAM (those of the
//   offloaded layers take the least time read from RAM per token: only the routed experts are).
import type { GgufFile } from '../gguf/reader.js';
import { isExpertTensor } from './moe.js';

const MiB = 1024 * 1024;

/** A device as systemInfo() reports it. */
export interface FitDevice {
  name: string;
  description?: string;
  type: 'cpu' | 'gpu' | 'igpu' | 'accel';
  memoryFree: number;
  memoryTotal: number;
}

/** The sizes of a model that the plan needs. */
export interface FitModelSizes {
  architecture: string;
  /** Repeating layers (n_layer). */
  layers: number;
  /** Weight bytes of each repeating layer (`blk.N.*`), its experts included. */
  layerBytes: readonly number[];
  /** Of those, the bytes of each layer's MoE expert tensors (src/model/moe.ts); absent or 0 for dense layers. */
  expertBytes?: readonly number[];
  /** The output head: output.weight (or the tied token embeddings) and output_norm. */
  outputBytes: number;
  /** Token embeddings and anything else that stays on the host. */
  hostBytes: number;
  /** K+V bytes per token of each layer at F16 (0 for a layer without attention KV). */
  kvBytesPerToken: readonly number[];
  /** Compute-buffer bytes of a device holding layers (activations of one 512-token micro-batch). */
  computeBytes: number;
  /** Extra compute-buffer bytes of the device holding the output head (logits of one micro-batch). */
  outputComputeBytes: number;
  trainingContextSize: number;
}

export interface FitRequest {
  /** Context size (KV cells in all) wanted. Default 4096. */
  contextSize?: number;
  /** Parallel sequences (reported; the KV size depends on contextSize only). Default 1. */
  sequences?: number;
  /** The context is not reduced below this. Default min(4096, contextSize). */
  contextFloor?: number;
  /** Free memory left on each GPU. Default 1 GiB (llama.cpp's default); less for GPUs under 8 GiB. */
  marginBytes?: number;
  /** Bytes per KV element relative to F16 (q8_0 K+V: about 0.53). Default 1. */
  kvScale?: number;
  /**
   * Keep the experts of the first N layers in system RAM (a number of layers, or 'all'), as the
   * load was asked to: the plan then does not choose it. Default: the plan chooses.
   */
  nCpuMoe?: number | 'all';
}

export interface FitDevicePlan {
  /** Index among the GPUs used (tensorSplit order). */
  index: number;
  name: string;
  description?: string;
  memoryFree: number;
  /** Layers placed on it (the output head counts as one). */
  layers: number;
  /** Bytes the plan expects it to use: weights, KV, compute. */
  bytes: number;
}

/** Where a MoE model's experts go (Fitplan.experts). */
export interface FitExpertPlan {
  /** Expert bytes of the whole model. */
  totalBytes: number;
  /** Offloaded layers whose experts stay in system RAM. */
  layersInRam: number;
  /** Their expert bytes (part of hostBytes). */
  bytesInRam: number;
  /** Expert bytes on the GPUs. */
  bytesOnGpu: number;
}

/** The plan `gpuLayers: 'auto'` loads with (see `Model.fit`). */
export interface FitPlan {
  /**
   * 'gpu': everything offloaded; 'moe': every layer offloaded, the experts of the first
   * `nCpuMoe` layers in system RAM; 'split': some layers on the CPU; 'cpu': nothing offloaded.
   */
  mode: 'gpu' | 'moe' | 'split' | 'cpu';
  /** n_gpu_layers given to llama.cpp (of `totalLayers`). */
  gpuLayers: number;
  /** Repeating layers + the output head. */
  totalLayers: number;
  /** Layers per GPU, in device order (llama.cpp's tensor_split); empty when nothing is offloaded. */
  tensorSplit: number[];
  /** The load keeps the experts of layers 0 .. nCpuMoe-1 in system RAM (0: none; see `cpuMoe`). */
  nCpuMoe: number;
  /** nCpuMoe covers every layer (the load's `cpuMoe: true`). */
  cpuMoe: boolean;
  /** Where the experts go; absent for a model without experts. */
  experts?: FitExpertPlan;
  devices: FitDevicePlan[];
  /** The context size planned for: contexts created without a contextSize use it. */
  contextSize: number;
  requestedContextSize: number;
  contextFloor: number;
  sequences: number;
  /** Bytes the layers left on the CPU (and their KV) need in host memory. */
  hostBytes: number;
  /** Why: one sentence per decision. */
  reasons: string[];
  /** Set when the model runs split or on the CPU although a GPU exists, or host memory is short. */
  warning?: string;
}

// MiB, or KiB below one MiB (small MoE layers and test models would all read "0 MiB").
const mib = (b: number): string =>
  b > 0 && b < MiB ? `${Math.max(1, Math.round(b / 1024)).toLocaleString('en-US')} KiB` : `${Math.round(b / MiB).toLocaleString('en-US')} MiB`;

function num(file: GgufFile, key: string): number | undefined {
  const v = file.metadata.get(key);
  if (!v) return undefined;
  if (v.type === 'u64' || v.type === 'i64') return Number(v.value);
  if (typeof v.value === 'number') return v.value;
  return undefined;
}

/** A per-layer value: a scalar for all layers, or an array with one per layer. */
function perLayer(file: GgufFile, key: string, layers: number): number[] | undefined {
  const v = file.metadata.get(key);
  if (!v) return undefined;
  if (v.type === 'array') return Array.from({ length: layers }, (_, i) => Number((v.value as readonly unknown[])[i] ?? 0));
  const n = num(file, key);
  return n === undefined ? undefined : new Array<number>(layers).fill(n);
}

/** The sizes the planner needs, read from a GGUF header (no tensor data is read). */
export function modelSizesFromGguf(file: GgufFile): FitModelSizes {
  const arch = String(file.metadata.get('general.architecture')?.value ?? 'unknown');
  const layers = num(file, `${arch}.block_count`) ?? 0;
  const layerBytes = new Array<number>(layers).fill(0);
  const expertBytes = new Array<number>(layers).fill(0);
  let output = 0;
  let outputNorm = 0;
  let tokenEmbd = 0;
  let host = 0;
  for (const t of file.tensors) {
    const m = /^blk\.(\d+)\./.exec(t.name);
    if (m) {
      const il = Number(m[1]);
      if (il < layers) {
        layerBytes[il]! += t.byteSize;
        if (isExpertTensor(t.name)) expertBytes[il]! += t.byteSize;
      } else host += t.byteSize; // e.g. next-token-prediction layers beyond block_count
    } else if (t.name === 'output.weight') output += t.byteSize;
    else if (t.name.startsWith('output_norm') || t.name.startsWith('output.')) outputNorm += t.byteSize;
    else if (t.name === 'token_embd.weight') tokenEmbd += t.byteSize;
    else host += t.byteSize;
  }
  // Tied embeddings: llama.cpp loads token_embd a second time as the output head.
  const outputBytes = (output > 0 ? output : tokenEmbd) + outputNorm;
  const embd = num(file, `${arch}.embedding_length`) ?? 0;
  const heads = perLayer(file, `${arch}.attention.head_count`, layers) ?? new Array<number>(layers).fill(0);
  const headsKv = perLayer(file, `${arch}.attention.head_count_kv`, layers) ?? heads;
  const maxHeads = Math.max(1, ...heads);
  const keyLen = num(file, `${arch}.attention.key_length`) ?? Math.floor(embd / maxHeads);
  const valLen = num(file, `${arch}.attention.value_length`) ?? keyLen;
  const kvBytesPerToken = headsKv.map((h) => h * (keyLen + valLen) * 2);
  const ff = perLayer(file, `${arch}.feed_forward_length`, layers) ?? [4 * embd];
  const maxFf = Math.max(0, ...ff);
  const tokens = file.metadata.get('tokenizer.ggml.tokens');
  const vocab = tokens?.type === 'array' ? tokens.value.length : (num(file, `${arch}.vocab_size`) ?? 0);
  const ubatch = 512;
  return {
    architecture: arch,
    layers,
    layerBytes,
    expertBytes,
    outputBytes,
    hostBytes: tokenEmbd + host,
    kvBytesPerToken,
    // F32 activations of one micro-batch: residual, norm, q/k/v/attention output, and the FFN's
    // up/gate/hidden (ggml reuses buffers, so this is an upper estimate).
    computeBytes: ubatch * 4 * (6 * embd + 3 * maxFf),
    outputComputeBytes: ubatch * 4 * vocab,
    trainingContextSize: num(file, `${arch}.context_length`) ?? 0,
  };
}

interface Fill {
  /** Layers per GPU (device order). */
  counts: number[];
  bytes: number[];
  total: number;
  /** The experts of layers 0 .. nCpuMoe-1 stay in RAM (clamped to the layers). */
  nCpuMoe: number;
}

const expertsOf = (m: FitModelSizes, il: number): number => m.expertBytes?.[il] ?? 0;

/**
 * Places the last layers (the output head first) on the GPUs from the last device to the first,
 * as many as fit in each one's free memory less the margin, at `ctx` KV cells per layer; the
 * experts of layers below `nCpuMoe` are not counted (they stay in RAM).
 */
function fill(m: FitModelSizes, gpus: FitDevice[], ctx: number, margin: number, kvScale: number, nCpuMoe: number): Fill {
  const total = m.layers + 1;
  const cost = (il: number): number =>
    il === m.layers
      ? m.outputBytes
      : m.layerBytes[il]! - (il < nCpuMoe ? expertsOf(m, il) : 0) + Math.ceil(m.kvBytesPerToken[il]! * kvScale) * ctx;
  const counts = gpus.map(() => 0);
  const bytes = gpus.map(() => 0);
  let next = m.layers; // the next layer to place, from the output head down
  for (let d = gpus.length - 1; d >= 0 && next >= 0; d--) {
    const budget = gpus[d]!.memoryFree - margin;
    let used = m.computeBytes + (next === m.layers ? m.outputComputeBytes : 0);
    if (used > budget) continue;
    while (next >= 0 && used + cost(next) <= budget) {
      used += cost(next);
      counts[d]!++;
      next--;
    }
    // A GPU given 0 layers is skipped by llama.cpp's split, so the head may land on an earlier one.
    if (counts[d]! > 0) bytes[d] = used;
  }
  return { counts, bytes, total: counts.reduce((a, b) => a + b, 0), nCpuMoe: Math.min(nCpuMoe, m.layers) };
}

/** The offloaded layers whose experts stay in RAM, and their expert bytes. */
function expertsInRam(m: FitModelSizes, gpuLayers: number, nCpuMoe: number): { layers: number; bytes: number } {
  let layers = 0;
  let bytes = 0;
  for (let il = Math.max(0, m.layers + 1 - gpuLayers); il < Math.min(nCpuMoe, m.layers); il++) {
    if (expertsOf(m, il) === 0) continue;
    layers++;
    bytes += expertsOf(m, il);
  }
  return { layers, bytes };
}

function hostNeed(m: FitModelSizes, gpuLayers: number, ctx: number, kvScale: number, nCpuMoe: number): number {
  let b = m.hostBytes;
  const firstGpu = m.layers + 1 - gpuLayers;
  for (let il = 0; il < Math.min(firstGpu, m.layers); il++) b += m.layerBytes[il]! + Math.ceil(m.kvBytesPerToken[il]! * kvScale) * ctx;
  if (gpuLayers === 0) b += m.outputBytes + m.computeBytes + m.outputComputeBytes;
  return b + expertsInRam(m, gpuLayers, nCpuMoe).bytes;
}

/**
 * Plans `gpuLayers: 'auto'`: all layers on the GPUs at the requested context when they fit; else
 * the context reduced (not below the floor) so that they do; else, for a MoE model, the experts
 * of the fewest first layers kept in RAM so that every layer fits at the floor; else as many
 * layers as fit at the floor (split, a MoE model's experts in RAM), or none (CPU).
 */
export function planFit(m: FitModelSizes, devices: readonly FitDevice[], request: FitRequest = {}): FitPlan {
  const requested = request.contextSize ?? 4096;
  const floor = Math.min(request.contextFloor ?? 4096, requested);
  const sequences = request.sequences ?? 1;
  const kvScale = request.kvScale ?? 1;
  const totalLayers = m.layers + 1;
  const reasons: string[] = [];
  const cpu = devices.find((d) => d.type === 'cpu');
  const gpus = devices.filter((d) => (d.type === 'gpu' || d.type === 'igpu') && (d.memoryFree > 0 || d.memoryTotal > 0));
  const silent = devices.filter((d) => (d.type === 'gpu' || d.type === 'igpu') && d.memoryFree === 0 && d.memoryTotal === 0);
  for (const d of silent) reasons.push(`${d.name} reports no memory, so no layers are planned on it`);
  const kvAll = m.kvBytesPerToken.reduce((a, b) => a + b, 0) * kvScale;
  const weights = m.layerBytes.reduce((a, b) => a + b, 0) + m.outputBytes;
  const expertTotal = (m.expertBytes ?? []).reduce((a, b) => a + b, 0);
  const expertLayers = (m.expertBytes ?? []).filter((b) => b > 0).length;
  reasons.push(
    `model: ${m.layers} layer${m.layers === 1 ? '' : 's'} + output head, ${mib(weights)} of offloadable weights${expertTotal > 0 ? ` (${mib(expertTotal)} of them MoE experts, in ${expertLayers} layers)` : ''}, KV ${(kvAll / 1024).toFixed(1)} KiB per token (${mib(kvAll * requested)} at ${requested} tokens)`,
  );
  // The experts' placement: fixed by the load's options, or chosen below for a MoE model.
  const fixed = request.nCpuMoe === undefined ? undefined : request.nCpuMoe === 'all' ? m.layers : Math.min(Math.max(0, Math.floor(request.nCpuMoe)), m.layers);
  const choose = fixed === undefined && expertTotal > 0;
  const n0 = fixed ?? 0;
  if (fixed !== undefined && fixed > 0) {
    reasons.push(
      expertTotal > 0
        ? `the experts of ${fixed === m.layers ? 'every layer' : `the first ${fixed} layers`} stay in system RAM, as the load asks (cpuMoe/nCpuMoe)`
        : 'cpuMoe/nCpuMoe asked, but the model has no expert tensors: nothing moves',
    );
  }

  const finish = (mode: FitPlan['mode'], f: Fill | undefined, ctx: number, warning?: string): FitPlan => {
    const gpuLayers = f?.total ?? 0;
    const nCpuMoe = gpuLayers > 0 ? f!.nCpuMoe : n0;
    const host = hostNeed(m, gpuLayers, ctx, kvScale, nCpuMoe);
    let warn = warning;
    if (cpu && cpu.memoryFree > 0 && host > cpu.memoryFree) {
      const line = `the host part needs about ${mib(host)} but ${mib(cpu.memoryFree)} of RAM is free (memory-mapped weights page in from disk)`;
      reasons.push(line);
      warn = warn ? `${warn}; ${line}` : line;
    }
    const used = f ? gpus.map((g, i) => ({ g, i })).filter(({ i }) => f.counts[i]! > 0) : [];
    const inRam = expertsInRam(m, gpuLayers, nCpuMoe);
    const firstGpu = m.layers + 1 - gpuLayers;
    let onGpu = 0;
    for (let il = Math.max(0, firstGpu); il < m.layers; il++) if (il >= nCpuMoe) onGpu += expertsOf(m, il);
    return {
      mode,
      gpuLayers,
      totalLayers,
      tensorSplit: f && gpuLayers > 0 ? [...f.counts] : [],
      nCpuMoe,
      cpuMoe: m.layers > 0 && nCpuMoe >= m.layers,
      ...(expertTotal > 0 ? { experts: { totalBytes: expertTotal, layersInRam: inRam.layers, bytesInRam: inRam.bytes, bytesOnGpu: onGpu } } : {}),
      devices: used.map(({ g, i }) => ({ index: i, name: g.name, ...(g.description ? { description: g.description } : {}), memoryFree: g.memoryFree, layers: f!.counts[i]!, bytes: f!.bytes[i]! })),
      contextSize: ctx,
      requestedContextSize: requested,
      contextFloor: floor,
      sequences,
      hostBytes: host,
      reasons,
      ...(warn ? { warning: warn } : {}),
    };
  };
  // All layers offloaded: 'moe' when some of their experts stay in RAM.
  const allMode = (n: number): FitPlan['mode'] => (expertsInRam(m, totalLayers, n).bytes > 0 ? 'moe' : 'gpu');

  if (gpus.length === 0) {
    reasons.push(
      silent.length > 0
        ? 'no GPU that reports its memory: every layer runs on the CPU'
        : 'no GPU device: llama.cpp sees only the CPU (a CPU build, or no GPU driver), so every layer runs on the CPU',
    );
    return finish('cpu', undefined, requested);
  }
  const margin = request.marginBytes ?? Math.min(1024 * MiB, Math.max(256 * MiB, Math.floor(Math.min(...gpus.map((g) => g.memoryTotal || g.memoryFree)) / 16)));
  const freeText = gpus.map((g) => `${g.name} ${mib(g.memoryFree)} free`).join(', ');
  reasons.push(`GPUs: ${freeText}; ${mib(margin)} kept free on each`);

  const full = fill(m, gpus, requested, margin, kvScale, n0);
  if (full.total === totalLayers) {
    reasons.push(`all ${totalLayers} layers and a ${requested}-token context fit`);
    return finish(allMode(n0), full, requested);
  }
  // Reduce the context (multiples of 256, not below the floor) until every layer fits.
  if (requested > floor) {
    const atFloor = fill(m, gpus, floor, margin, kvScale, n0);
    if (atFloor.total === totalLayers) {
      let lo = Math.ceil(floor / 256);
      let hi = Math.floor(requested / 256);
      let best = floor;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        if (fill(m, gpus, mid * 256, margin, kvScale, n0).total === totalLayers) {
          best = Math.max(best, mid * 256);
          lo = mid + 1;
        } else hi = mid - 1;
      }
      reasons.push(`all ${totalLayers} layers fit with the context reduced from ${requested} to ${best} tokens (floor ${floor})`);
      return finish(allMode(n0), fill(m, gpus, best, margin, kvScale, n0), best);
    }
  }
  const ctx = floor;
  const reduced = requested > floor ? ` (reduced from ${requested}, the floor)` : '';
  // A MoE model whose layers fit without (some of) their experts: the fewest first layers'
  // experts in RAM (each more layer only lowers the GPU's share, so the first that fits is the least).
  if (choose && fill(m, gpus, ctx, margin, kvScale, m.layers).total === totalLayers) {
    let n = 1;
    while (n < m.layers && fill(m, gpus, ctx, margin, kvScale, n).total < totalLayers) n++;
    const f = fill(m, gpus, ctx, margin, kvScale, n);
    const inRam = expertsInRam(m, totalLayers, n);
    reasons.push(
      `all ${totalLayers} layers fit with a ${ctx}-token context${reduced} when the experts of the first ${n} of ${m.layers} layers (${mib(inRam.bytes)}) stay in system RAM: nCpuMoe ${n}${n === m.layers ? ' (cpuMoe)' : ''}`,
    );
    return finish('moe', f, ctx, `the model's experts do not all fit in GPU memory: those of ${n} of ${m.layers} layers stay in system RAM (slower than all on the GPU)`);
  }
  const part = fill(m, gpus, ctx, margin, kvScale, choose ? m.layers : n0);
  if (part.total === 0) {
    reasons.push(`not even the output head fits in ${freeText} with a ${ctx}-token context: every layer runs on the CPU`);
    return finish('cpu', part, ctx, `the model does not fit in GPU memory (${freeText}): running on the CPU, much slower`);
  }
  reasons.push(
    `only ${part.total} of ${totalLayers} layers fit with a ${ctx}-token context${reduced}${choose ? ', even with every layer\'s experts in system RAM (cpuMoe)' : ''}: the other ${totalLayers - part.total} run on the CPU`,
  );
  return finish('split', part, ctx, `the model does not fit in GPU memory: ${part.total} of ${totalLayers} layers on the GPU, ${totalLayers - part.total} on the CPU (slower)`);
}

/** A plan as text lines (`llamux doctor`). */
export function describePlan(plan: FitPlan): string[] {
  const what =
    plan.mode === 'gpu'
      ? 'all on the GPU'
      : plan.mode === 'moe'
        ? `all layers on the GPU, the experts of ${plan.cpuMoe ? 'every layer' : `the first ${plan.nCpuMoe} layers`} in system RAM`
        : plan.mode === 'split'
          ? 'split between GPU and CPU'
          : 'CPU only';
  const lines = [`plan: ${what}, ${plan.gpuLayers} of ${plan.totalLayers} layers offloaded, context ${plan.contextSize} tokens`];
  for (const d of plan.devices) lines.push(`  ${d.name}: ${d.layers} layers, about ${mib(d.bytes)} of ${mib(d.memoryFree)} free`);
  const e = plan.experts;
  if (e && plan.gpuLayers > 0) {
    lines.push(
      e.bytesInRam === 0
        ? `  experts: ${mib(e.totalBytes)} in all, ${mib(e.bytesOnGpu)} of them on the GPU`
        : `  experts: ${mib(e.totalBytes)} in all; ${mib(e.bytesOnGpu)} on the GPU, ${mib(e.bytesInRam)} (of ${e.layersInRam} offloaded layer${e.layersInRam === 1 ? '' : 's'}) in system RAM`,
    );
  }
  if (plan.nCpuMoe > 0) lines.push(`  load options: ${plan.cpuMoe ? 'cpuMoe: true' : `nCpuMoe: ${plan.nCpuMoe}`}`);
  lines.push(`  host: about ${mib(plan.hostBytes)}`);
  lines.push('why:');
  for (const r of plan.reasons) lines.push(`  - ${r}`);
  if (plan.warning) lines.push(`warning: ${plan.warning}`);
  return lines;
}
