// The scripted model and LoRA adapter of the LoRA tests (test/api/lora.test.ts explains the
// arithmetic; test/server/lora.test.ts serves them).
import { encodeGguf } from '../../src/gguf/writer.js';
import { buildScriptedModel } from '../../src/gguf/scripted.js';
import { buildLoraAdapter } from '../../src/gguf/lora.js';
import { sp } from '../../src/gguf/vocab.js';
import { val } from '../../src/gguf/types.js';

export const built = buildScriptedModel({
  name: 'lora-two-scripts',
  scripts: [
    { name: 'A', prompt: sp('Fruit| ?'), continuation: sp(' apple| pie| crust') },
    { name: 'B', prompt: sp('Colour| !'), continuation: sp(' deep| blue| sea') },
  ],
});
const desc = built.description;
export const A = desc.scripts.A!;
export const B = desc.scripts.B!;
const D = desc.nEmbd;
export const V = desc.nVocab;
const apple = desc.tokens['▁apple']!;
const deep = desc.tokens['▁deep']!;
const outputHead = built.gguf.tensors.find((t) => t.name === 'output.weight')!.data as Float32Array;

/**
 * The adapter that makes " deep" follow "?" (see the top); `vocab` other than V: shapes of another
 * vocabulary; `declaredVocab`: the vocabulary size its metadata names (shapes unchanged).
 */
export function adapterGguf(opts: { architecture?: string; vocab?: number; declaredVocab?: number } = {}): Uint8Array {
  const nOut = opts.vocab ?? V;
  const b = new Float32Array(nOut);
  b[deep] = 1;
  return encodeGguf(
    buildLoraAdapter({
      architecture: opts.architecture ?? 'llama',
      ...(opts.declaredVocab !== undefined ? { metadata: [['llama.vocab_size', val.u32(opts.declaredVocab)] as const] } : {}),
      alpha: 2,
      rank: 1,
      tensors: [{ base: 'output.weight', shape: [D, nOut], a: outputHead.slice(apple * D, apple * D + D), b }],
    }),
  );
}

