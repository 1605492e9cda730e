// `llamux doctor --model PATH --gpu-memory MIB`: the plan for a MoE model on an assumed GPU
// (this machine has none): layers on the device, the experts in RAM, bytes each. The expected
// nCpuMoe is computed here from the GGUF's tensor sizes.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readGgufFile } from '../../src/gguf/reader.js';
import { parseGpuMemory } from '../../src/cli/args.js';
import { modelSizesFromGguf } from '../../src/model/fit.js';
import { projectRoot } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

const MiB = 1024 * 1024;

function doctor(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(projectRoot, 'src', 'cli.ts'), 'doctor', ...args], {
    cwd: projectRoot,
    env: { ...process.env, NODE_NO_WARNINGS: '1' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('llamux doctor on a MoE model', () => {
  it('plans the experts of the first N layers into RAM on an assumed GPU, and says so', async () => {
    const path = (await zooModels(['qwen35moe'])).qwen35moe.path;
    const g = await readGgufFile(path);
    const s = modelSizesFromGguf(g);
    const ctx = 256;
    const experts = new Array<number>(s.layers).fill(0);
    for (const t of g.tensors) {
      const m = /^blk\.(\d+)\.ffn_(?:up|down|gate)_exps\.weight$/.exec(t.name);
      if (m) experts[Number(m[1])]! += t.byteSize;
    }
    let dense = s.computeBytes + s.outputComputeBytes + s.outputBytes;
    for (let il = 0; il < s.layers; il++) dense += s.layerBytes[il]! - experts[il]! + s.kvBytesPerToken[il]! * ctx;
    const all = dense + experts.reduce((a, b) => a + b, 0);
    // the default margin for a GPU under 4 GiB is 256 MiB
    const margin = 256 * MiB;
    const mib = Math.ceil((dense + margin) / MiB); // the dense part fits
    const budget = mib * MiB - margin;
    expect(budget, 'the zoo model is too small for whole MiB to leave some experts out').toBeLessThan(all);
    // the smallest N whose layers' experts, left out, let everything fit
    let n = 0;
    for (let left = all; left > budget; n++) left -= experts[n]!;

    const r = doctor(['--model', path, '--ctx', String(ctx), '--gpu-memory', String(mib)]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`plan: all layers on the GPU, the experts of ${n === s.layers ? 'every layer' : `the first ${n} layers`} in system RAM, ${s.layers + 1} of ${s.layers + 1} layers offloaded, context ${ctx} tokens`);
    expect(r.stdout).toMatch(new RegExp(`^  GPU0: ${s.layers + 1} layers, about [\\d,]+ MiB of ${mib} MiB free$`, 'm'));
    const kib = (b: number) => (b === 0 ? '0 MiB' : `${Math.round(b / 1024)} KiB`);
    const inRam = experts.slice(0, n).reduce((a, b) => a + b, 0);
    expect(r.stdout).toContain(`  experts: ${kib(all - dense)} in all; ${kib(all - dense - inRam)} on the GPU, ${kib(inRam)} (of ${n} offloaded layer${n === 1 ? '' : 's'}) in system RAM\n`);
    expect(r.stdout).toContain(n === s.layers ? 'load options: cpuMoe: true' : `load options: nCpuMoe: ${n}`);
    expect(r.stdout).toMatch(/^warning: the model's experts do not all fit in GPU memory/m);

    const j = doctor(['--model', path, '--ctx', String(ctx), '--gpu-memory', String(mib), '--json']);
    const plan = (JSON.parse(j.stdout) as { plan: { mode: string; nCpuMoe: number; cpuMoe: boolean; experts: { bytesInRam: number } } }).plan;
    expect(plan).toMatchObject({ mode: 'moe', nCpuMoe: n, cpuMoe: n === s.layers });
    expect(plan.experts.bytesInRam).toBe(inRam);

    // room for everything: nothing moves
    const roomy = doctor(['--model', path, '--ctx', String(ctx), '--gpu-memory', '4096']);
    expect(roomy.stdout).toMatch(/^plan: all on the GPU, 5 of 5 layers offloaded/m);
    expect(roomy.stdout).not.toContain('load options:');
    // the load options, as asked
    const asked = doctor(['--model', path, '--ctx', String(ctx), '--gpu-memory', '4096', '--cpu-moe']);
    expect(asked.stdout).toContain('load options: cpuMoe: true');
    expect(asked.stdout).toContain('as the load asks');

    const both = doctor(['--model', path, '--cpu-moe', '--n-cpu-moe', '2']);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain('give --cpu-moe or --n-cpu-moe, not both');
    for (const bad of ['lots', '0', '1,,2', '-5']) expect(() => parseGpuMemory(bad), bad).toThrow(/--gpu-memory expects/);
    expect(parseGpuMemory('8192,4096').map((d) => d.memoryFree)).toEqual([8192 * MiB, 4096 * MiB]);
  }, 120_000);
});
