// Qwen-VL images (issue 37) against llama.cpp itself: llama-server built from the same pinned
// source (bench/drivers/llama-server.ts builds it into .cache once: minutes on a fresh checkout,
// so this file runs in `npm run test:slow`), with --mmproj, gives the same greedy tokens and
// logprobs as llamux for image prompts on the zoo's qwen35 (M-RoPE) with a generated
// qwen3vl_merger projector — which needs libmtmd's positions (an image advances the position by
// its larger side in merged patches, not by its embeddings).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Context, type GenerateResult, type Model, type PromptPart } from '../../src/index.js';
import type { ZooModelDescription } from '../../src/gguf/index.js';
import { llamaServerBinary, startLlamaServer, type LlamaServerHandle } from '../../bench/drivers/llama-server.js';
import { HEAD, TAIL, parts, square, wide } from '../helpers/qwen3vl-images.js';
import { ensureQwen3vlProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

interface ServerCompletion {
  tokens: number[];
  completion_probabilities: Array<{ id: number; logprob: number; top_logprobs: Array<{ id: number; logprob: number }> }>;
}

describe('Qwen-VL images match llama-server (same llama.cpp, --mmproj)', () => {
  let text: ZooModelDescription;
  let projectorPath: string;
  let model: Model;
  let ctx: Context;
  const run = (c: Context, p: PromptPart[] | Int32Array, maxTokens = 8) =>
    c.generate({ prompt: p, maxTokens, temperature: 0, emitTokenIds: true, logprobs: 3 }).result;

  beforeAll(async () => {
    text = (await zooModels(['qwen35']))['qwen35'];
    projectorPath = (await ensureQwen3vlProjector({ projectionDim: text.nEmbd })).path;
    model = await loadModel(text.path, { projector: projectorPath });
    ctx = await model.createContext({ contextSize: 512, sequences: 2, threads: 2, toolCallMarkers: false });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('greedy tokens and logprobs equal llama-server\'s (same llama.cpp, --mmproj) for image prompts, and for a later turn after a cache hit', { timeout: 1_200_000 }, async () => {
    // built once into .cache/llama-server-build from the pinned llama.cpp (minutes, the first time)
    const built = llamaServerBinary();
    expect(built.why).toBeUndefined();
    const bin = built.path;
    const srv: LlamaServerHandle = await startLlamaServer(bin!, text.path, { ctx: 512, parallel: 1, threads: 2, extraArgs: ['--mmproj', projectorPath] });
    try {
      // llama-server's media marker is random per process (so typed text cannot inject media)
      const marker = ((await (await fetch(`${srv.url}/props`)).json()) as { media_marker: string }).media_marker;
      const server = async (image: Uint8Array, tail: string): Promise<ServerCompletion> => {
        const body = {
          prompt: { prompt_string: `${HEAD}${marker}${tail}`, multimodal_data: [Buffer.from(image).toString('base64')] },
          n_predict: 8, temperature: 0, n_probs: 3, cache_prompt: false, return_tokens: true,
        };
        const r = await fetch(`${srv.url}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        const body1 = await r.text();
        expect(r.status, body1).toBe(200);
        return JSON.parse(body1) as ServerCompletion;
      };
      const compare = (ours: GenerateResult, theirs: ServerCompletion) => {
        expect(Array.from(ours.tokens!)).toEqual(theirs.tokens);
        let worst = 0;
        ours.logprobs!.forEach((l, i) => {
          const p = theirs.completion_probabilities[i]!;
          expect(p.id).toBe(l.token);
          worst = Math.max(worst, Math.abs(l.logprob - p.logprob));
          // the top values in order (near-equal ones may swap ids between two computations)
          const theirTop = p.top_logprobs.map((t) => t.logprob).sort((a, b) => b - a);
          l.top.forEach((t, k) => (worst = Math.max(worst, Math.abs(t.logprob - theirTop[k]!))));
        });
        console.log(`qwen3vl vs llama-server: logprobs within ${worst.toExponential(2)}`);
        // the same graphs on the same CPU; only the batch split of the prompt may differ: measured
        // 5e-6 (one position per embedding instead, as before: 7e-3)
        expect(worst).toBeLessThan(5e-4);
      };
      for (const image of [square, wide]) compare(await run(ctx, parts(image)), await server(image, TAIL));
      // a later turn: the same image and more text after it (the KV through the image reused)
      const later = TAIL + ' And what colour is it?';
      const ours = await run(ctx, parts(wide, later));
      expect(ours.reusedTokens).toBeGreaterThan(15); // a checkpoint past the image
      compare(ours, await server(wide, later));
    } finally {
      await srv.close();
    }
  });

});
