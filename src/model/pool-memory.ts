// The memory side of a ModelPool: what a model needs (the fit planner's plan, src/model/fit.ts)
// against what the loaded models leave of the pool's budget.
import { planFit, modelSizesFromGguf, type FitDevice, type FitModelSizes, type FitPlan, type FitRequest } from './fit.js';

const MiB = 1024 * 1024;
export const mib = (b: number): string => `${Math.round(b / MiB).toLocaleString('en-US')} MiB`;

/** Bytes a loaded model holds: host memory, and each GPU's (in the budget's GPU order). */
export interface Footprint {
  readonly host: number;
  readonly gpus: readonly number[];
}

/** The GPUs planFit plans on, in its order (devices reporting memory). */
function gpusOf(devices: readonly FitDevice[]): FitDevice[] {
  return devices.filter((d) => (d.type === 'gpu' || d.type === 'igpu') && (d.memoryFree > 0 || d.memoryTotal > 0));
}

/** The budget less what the given footprints hold. */
export function remaining(budget: readonly FitDevice[], used: readonly Footprint[]): FitDevice[] {
  const gpus = gpusOf(budget);
  const host = used.reduce((a, f) => a + f.host, 0);
  return budget.map((d) => {
    if (d.type === 'cpu') return d.memoryFree > 0 ? { ...d, memoryFree: Math.max(1, d.memoryFree - host) } : d;
    const i = gpus.indexOf(d);
    if (i < 0) return d;
    const held = used.reduce((a, f) => a + (f.gpus[i] ?? 0), 0);
    return { ...d, memoryFree: Math.max(0, d.memoryFree - held) };
  });
}

export function footprintOf(plan: FitPlan, budget: readonly FitDevice[]): Footprint {
  const gpus = gpusOf(budget).map(() => 0);
  for (const d of plan.devices) gpus[d.index] = d.bytes;
  return { host: plan.hostBytes, gpus };
}

/** Host memory of the devices (the CPU device's free bytes), or undefined when unknown. */
export function hostFree(devices: readonly FitDevice[]): number | undefined {
  const cpu = devices.find((d) => d.type === 'cpu');
  return cpu && cpu.memoryFree > 0 ? cpu.memoryFree : undefined;
}

/** Whether a plan's host part fits the devices' host memory (unknown host memory: it does). */
export function hostFits(plan: FitPlan, devices: readonly FitDevice[]): boolean {
  const free = hostFree(devices);
  return free === undefined || plan.hostBytes <= free;
}

/** What a model's files need, read from their GGUF headers; undefined when they cannot be read. */
export async function modelSizes(files: readonly string[]): Promise<FitModelSizes | undefined> {
  try {
    // Loaded lazily, as load.ts does: the root export keeps the GGUF modules out of its static graph.
    const { readGgufFile } = await import('../gguf/reader.js');
    const first = await readGgufFile(files[0]!);
    // A split model's tensors are spread over its shards; the first one holds the metadata.
    const tensors = [...first.tensors];
    for (const f of files.slice(1)) tensors.push(...(await readGgufFile(f)).tensors);
    const sizes = modelSizesFromGguf({ ...first, tensors });
    return sizes.layers > 0 ? sizes : undefined;
  } catch {
    return undefined;
  }
}

export { planFit, type FitDevice, type FitModelSizes, type FitPlan, type FitRequest };
