// MoE expert placement (`cpuMoe` / `nCpuMoe`): which tensors are a layer's experts, and the
// pattern that keeps them in system RAM. llama.cpp matches each tensor name against the
// `tensor_buft_overrides` patterns with std::regex (ECMAScript grammar, regex_search), the same
// grammar as JavaScript's for what is used here, so one pattern serves both the fit planner's
// byte counts (src/model/fit.ts) and the native load.
//
// Expert tensors (llama-arch.cpp): blk.N.ffn_{up,down,gate,gate_up}_exps and the chunked
// ffn_{up,down,gate}_chexps, each with its `.weight` and, where the architecture has them,
// `.bias`, `.scale`, `.input_scale`. The router (ffn_gate_inp), the shared experts (`*_shexp`)
// and ffn_norm_exps are small and stay with their layer.

const EXPERT_SUFFIX = String.raw`\.ffn_(?:up|down|gate|gate_up)_(?:ch)?exps\.`;

/** Matches any layer's expert tensors. */
export const EXPERT_TENSOR_PATTERN = String.raw`^blk\.\d+` + EXPERT_SUFFIX;
const expertTensor = new RegExp(EXPERT_TENSOR_PATTERN);

export function isExpertTensor(name: string): boolean {
  return expertTensor.test(name);
}

/**
 * A regular expression (no anchors) for the decimal numbers 0 .. n-1 as GGUF writes layer
 * numbers (no leading zeros): the shorter numbers, then for each digit of n the numbers that
 * share its prefix and are lower at that digit. n >= 1.
 */
export function numbersBelow(n: number): string {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`numbersBelow needs an integer >= 1, got ${n}`);
  const s = String(n);
  const d = s.length;
  const parts: string[] = [];
  if (d > 1) parts.push(String.raw`\d`);
  for (let k = 2; k < d; k++) parts.push(String.raw`[1-9]\d{${k - 1}}`);
  for (let i = 0; i < d; i++) {
    const lo = i === 0 && d > 1 ? 1 : 0;
    const c = Number(s[i]);
    if (c <= lo) continue;
    const rest = d - i - 1;
    parts.push(`${s.slice(0, i)}[${lo}-${c - 1}]${rest > 0 ? String.raw`\d{${rest}}` : ''}`);
  }
  return parts.join('|');
}

/**
 * The pattern whose tensors stay in a CPU buffer: the experts of every layer ('all') or of
 * layers 0 .. n-1; undefined when nothing moves (n = 0).
 */
export function expertOverridePattern(layers: number | 'all'): string | undefined {
  if (layers === 'all') return EXPERT_TENSOR_PATTERN;
  if (layers <= 0) return undefined;
  return String.raw`^blk\.(?:${numbersBelow(layers)})` + EXPERT_SUFFIX;
}

/**
 * The layer count of a load's `cpuMoe` / `nCpuMoe` options: 'all', a number (`cpuMoe: false`
 * alone is 0: no experts move, and the fit plan may not move any either), or undefined when
 * neither is given (the plan chooses).
 */
export function cpuMoeLayers(o: { cpuMoe?: boolean; nCpuMoe?: number }): number | 'all' | undefined {
  if (o.cpuMoe === true) return 'all';
  return o.nCpuMoe ?? (o.cpuMoe === false ? 0 : undefined);
}
