// `llamux doctor`'s report: the devices, their free memory, the CPU variant, and the plan for a
// model (src/model/fit.ts), as text or JSON.
import { describePlan, type FitPlan } from '../model/fit.js';
import type { SystemInfo } from '../native/system-info.js';

const mibText = (b: number): string => `${Math.round(b / 1024 / 1024).toLocaleString('en-US')} MiB`;

export function printDoctor(info: SystemInfo, plan: FitPlan | undefined, modelPath: string | undefined, json: boolean): void {
  if (json) {
    const { llamaSystemInfo: _omit, ...rest } = info;
    console.log(JSON.stringify({ system: rest, ...(plan ? { model: modelPath!, plan } : {}) }, null, 2));
    return;
  }
  console.log(`cpu        ${info.cpuModel} (${info.cpuCount} CPUs)`);
  console.log(`features   ${info.cpuFeatures.join(' ') || '(none listed)'}`);
  console.log(`variant    ${info.cpuVariant} (${info.buildKind} build${info.cpuVariants.length ? `; available: ${info.cpuVariants.map((v) => `${v.name}:${v.score}`).join(' ')}` : ''})`);
  console.log(`backends   ${info.loadedBackends.join(' ') || '(built in)'}`);
  console.log(`offload    ${info.supportsGpuOffload ? 'possible (a GPU or RPC backend is loaded)' : 'not in this build (CPU only)'}`);
  console.log('devices:');
  for (const d of info.devices) {
    console.log(`  ${d.name.padEnd(10)} ${d.type.padEnd(5)} ${mibText(d.memoryFree)} free of ${mibText(d.memoryTotal)}  ${d.description}`);
  }
  if (!info.devices.some((d) => d.type === 'gpu' || d.type === 'igpu')) {
    console.log('  (no GPU: a CPU-only build, or no GPU driver/device visible to llama.cpp)');
  }
  if (plan) {
    console.log(`model      ${modelPath!}`);
    for (const line of describePlan(plan)) console.log(line);
  }
}
