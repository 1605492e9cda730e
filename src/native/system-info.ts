// What llamux runs on: the CPU and its ISA features, the CPU backend variant ggml chose for
// it, the devices llama.cpp sees. Printed with every benchmark table and by `llamux inspect`.
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { gpuPackages, native } from './binding.js';

export interface SystemInfo {
  /** CPU model name, e.g. "AMD EPYC 9B14". */
  cpuModel: string;
  /** Logical CPUs. */
  cpuCount: number;
  /** The CPU's ISA features that matter to ggml's kernels (from /proc/cpuinfo on Linux). */
  cpuFeatures: string[];
  /** 'variants': the CPU backend is chosen at run time among builds per ISA level;
   * 'native': one static build tuned to the machine that built it (LLAMUX_NATIVE=1). */
  buildKind: 'variants' | 'native';
  /** The CPU backend variant in use ('haswell', 'zen4', 'sapphirerapids', …, or 'native').
   * LLAMUX_CPU_VARIANT=<name> forces one. */
  cpuVariant: string;
  /** Every CPU variant found and this CPU's score for it (0: it cannot run here). */
  cpuVariants: Array<{ name: string; score: number }>;
  /** Backend libraries loaded (CPU variant, RPC, GPU). */
  loadedBackends: string[];
  /** GPU backend packages found (@llamux/linux-x64-vulkan, ...): whether their check in a
   * child process passed (then their library is in loadedBackends), why not, the devices. */
  gpuPackages: Array<{ name: string; library: string; ok: boolean; reason?: string; devices: string[] }>;
  /** Devices llama.cpp can place layers on. */
  devices: Array<{ name: string; description: string; type: 'cpu' | 'gpu' | 'igpu' | 'accel'; memoryFree: number; memoryTotal: number }>;
  supportsGpuOffload: boolean;
  supportsMmap: boolean;
  maxParallelSequences: number;
  /** llama.cpp's own summary (`llama_print_system_info`). */
  llamaSystemInfo: string;
}

const INTERESTING = /^(sse4_2|avx|avx2|fma|f16c|bmi2|avx_vnni|avx512f|avx512bw|avx512vl|avx512dq|avx512cd|avx512vbmi|avx512_vnni|avx512_bf16|avx512_fp16|amx_tile|amx_int8|amx_bf16|asimd|sve|sve2|i8mm|asimddp)$/;

function cpuFeatures(): string[] {
  try {
    const text = readFileSync('/proc/cpuinfo', 'utf8');
    const line = text.split('\n').find((l) => /^(flags|Features)\s*:/.test(l));
    if (!line) return [];
    return line.split(':')[1]!.trim().split(/\s+/).filter((f) => INTERESTING.test(f));
  } catch {
    return [];
  }
}

/** Facts about this machine and the native build, for reports and troubleshooting. */
export function systemInfo(): SystemInfo {
  const n = native.systemInfo();
  const list = cpus();
  return {
    cpuModel: list[0]?.model.trim() ?? 'unknown',
    cpuCount: list.length,
    cpuFeatures: cpuFeatures(),
    buildKind: n.buildKind,
    cpuVariant: n.cpuVariant,
    cpuVariants: n.cpuVariants.map((v) => {
      const i = v.lastIndexOf(':');
      return { name: v.slice(0, i), score: Number(v.slice(i + 1)) };
    }),
    loadedBackends: n.loadedBackends,
    gpuPackages: gpuPackages.map((p) => ({ name: p.name, library: p.library, ok: p.ok, ...(p.reason !== undefined ? { reason: p.reason } : {}), devices: p.devices })),
    devices: n.devices,
    supportsGpuOffload: n.supportsGpuOffload,
    supportsMmap: n.supportsMmap,
    maxParallelSequences: n.maxParallelSequences,
    llamaSystemInfo: n.llamaSystemInfo,
  };
}

/** One line for benchmark tables: "AMD EPYC 9B14 (2 CPUs; avx2 avx512f …), ggml CPU variant zen4". */
export function describeSystem(info: SystemInfo = systemInfo()): string {
  return `${info.cpuModel} (${info.cpuCount} CPUs; ${info.cpuFeatures.join(' ') || 'no feature list'}), ggml CPU variant ${info.cpuVariant} (${info.buildKind} build)`;
}
