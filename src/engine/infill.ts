// Fill-in-the-middle: the prompt a code model completes between a prefix and a suffix, built
// with the model's own FIM tokens (VocabInfo.fim). Prefix-suffix-middle order, as the coder
// families are trained (Qwen2.5-Coder, StarCoder, CodeLlama, DeepSeek-Coder ...). Extra files
// (repo-level context) go first: with the repo and file-separator tokens where the vocabulary
// has them (`<|repo_name|>`, `<|file_sep|>`), else as plain text.
import { LlamuxError } from '../errors.js';
import type { ModelHandle } from '../model/handle.js';

/** The text around the cursor (InfillOptionsSchema in src/options.ts validates it). */
export interface InfillInput {
  prefix: string;
  suffix: string;
  extra?: ReadonlyArray<{ filename?: string | undefined; text: string }> | undefined;
}

/** The model's FIM tokens, or UNSUPPORTED naming what it lacks. */
export function fimTokens(model: ModelHandle): { prefix: number; suffix: number; middle: number; repo: number; sep: number } {
  const f = model.vocab.fim;
  const missing = (['prefix', 'suffix', 'middle'] as const).filter((k) => f[k] < 0);
  if (missing.length > 0) {
    throw new LlamuxError('UNSUPPORTED', `This model has no fill-in-the-middle tokens (no FIM ${missing.join(', ')} token in its vocabulary): use a code model with FIM (Qwen2.5-Coder, StarCoder2, CodeLlama ...)`);
  }
  return f;
}

/**
 * The infill prompt as tokens: [BOS] [extra files] FIM_PREFIX prefix FIM_SUFFIX suffix FIM_MIDDLE.
 * Texts are tokenized without parsing special-token text (a file that contains "<|fim_middle|>"
 * stays text). Throws UNSUPPORTED when the model has no FIM tokens.
 */
export async function infillTokens(model: ModelHandle, input: InfillInput, signal?: AbortSignal): Promise<Int32Array> {
  const fim = fimTokens(model);
  const text = (s: string) => (s === '' ? Promise.resolve(new Int32Array(0)) : model.tokenizeAsync(s, { addSpecial: false, parseSpecial: false, ...(signal ? { signal } : {}) }));
  const out: number[] = [];
  if (model.vocab.addBos && model.vocab.bos >= 0) out.push(model.vocab.bos);
  if (input.extra && input.extra.length > 0) {
    if (fim.repo >= 0 && fim.sep >= 0) {
      out.push(fim.repo, ...(await text('myproject\n')));
      for (const f of input.extra) out.push(fim.sep, ...(await text(`${f.filename ?? 'file'}\n${f.text}`)));
      // the file being edited follows its own separator
      out.push(fim.sep);
    } else {
      for (const f of input.extra) out.push(...(await text(f.filename ? `// ${f.filename}\n${f.text}\n` : `${f.text}\n`)));
    }
  }
  out.push(fim.prefix, ...(await text(input.prefix)), fim.suffix, ...(await text(input.suffix)), fim.middle);
  return Int32Array.from(out);
}
