// `ctx.generateChoices({ n })`: n generations of one prompt, prefilled once. The prompt's KV
// (all but its last token) is computed on one session's sequence and forked n - 1 times
// (llama.cpp's seq_cp: with unified KV the cells are shared, not copied); each choice then
// decodes the last token itself, for its own logits, and samples with seed `seed + i`.
import { LlamuxError } from '../errors.js';
import type { Generation } from './generation.js';
import type { ResolvedMarkers } from './markers.js';
import type { ModelHandle } from '../model/handle.js';
import { applyResponseFormat, checkLogitBias, toolFields } from '../native/request.js';
import { GenerateOptionsSchema, parseOptions, type GenerateOptions } from '../options.js';
import { joinTokens, promptTokens } from './prompt-tokens.js';
import type { Session } from './session.js';
import type { AdapterUse } from '../model/adapter.js';

/** What generateChoices needs of its Context. */
export interface ChoicesPort {
  model: ModelHandle;
  markers: ResolvedMarkers | undefined;
  generate(options: GenerateOptions): Generation;
  createSession(): Session;
  prefixTokens(key: string): Int32Array;
  /** Computes `prefix`'s KV on the session's sequence, generating nothing. */
  prefill(session: Session, prefix: Int32Array, signal: AbortSignal | undefined, cacheScope: string, adapters: readonly AdapterUse[] | undefined): Promise<void>;
}

export async function generateChoices(ctx: ChoicesPort, options: GenerateOptions & { n: number }): Promise<Generation[]> {
  const { n, ...rest } = options ?? ({} as GenerateOptions & { n: number });
  if (!Number.isInteger(n) || n < 1 || n > 128) throw new LlamuxError('INVALID_ARGUMENT', `Invalid generateChoices options: n must be an integer from 1 to 128 (got ${String(n)})`);
  const o = applyResponseFormat(parseOptions(GenerateOptionsSchema, rest, 'generate options'));
  if (o.sessionId !== undefined) throw new LlamuxError('INVALID_ARGUMENT', 'generateChoices runs on sessions of its own: remove sessionId');
  toolFields(o, ctx.markers, ctx.model);
  checkLogitBias(o, ctx.model.vocab.size);
  let tokens = await promptTokens(ctx.model, o.prompt, o);
  if (o.parentKey !== undefined) {
    const tail = await promptTokens(ctx.model, o.prompt, { addSpecial: false, parseSpecial: false, signal: o.signal });
    tokens = joinTokens(ctx.prefixTokens(o.parentKey), tail);
  }
  const { parentKey: _p, prompt: _q, seed: _s, ...shared } = rest;
  const choice = (i: number): GenerateOptions => ({ ...shared, prompt: tokens, seed: (o.seed + i) % 2 ** 32 });
  if (n === 1 || tokens.length < 2) return Array.from({ length: n }, (_, i) => ctx.generate(choice(i)));
  const sessions: Session[] = [ctx.createSession()];
  try {
    // Everything but the last prompt token: each choice decodes that one for its own logits.
    const root = sessions[0]!;
    // with the choices' adapters: KV computed under another set would not be reused by them
    await ctx.prefill(root, tokens.subarray(0, tokens.length - 1), o.signal, o.cacheScope ?? '', o.adapters);
    for (let i = 1; i < n; i++) sessions.push(await root.fork());
  } catch (e) {
    await Promise.allSettled(sessions.map((s) => s.end()));
    throw e;
  }
  const gens: Generation[] = [];
  try {
    for (const [i, s] of sessions.entries()) {
      const gen = s.generate(choice(i));
      gen.result.then(() => s.end(), () => s.end()).catch(() => {});
      gens.push(gen);
    }
  } catch (e) {
    // A full queue part way: no choice runs alone.
    for (const g of gens) g.cancel();
    await Promise.allSettled(sessions.slice(gens.length).map((s) => s.end()));
    throw e;
  }
  return gens;
}
