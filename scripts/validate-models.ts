/**
 * Validates the generated GGUF models against real llama.cpp through node-llama-cpp (the same
 * llama.cpp release as the addon's), CPU only, never downloading or building anything:
 *
 * - every scripted fixture: llama.cpp tokenizes each prompt to the described tokens, greedy
 *   decoding reproduces the script token for token and stops at the described EOG token, and at
 *   temperature 1 over 20 seeds only the described near-tie branches vary (every sampled
 *   continuation is one of the described outcomes);
 * - the flag head on long prompts (filler of ~220 to ~5,000 tokens before the two-turn prompts);
 * - the demo model's chat template renders the two-turn prompts (with @huggingface/jinja);
 * - random-weight models: load and decode a few tokens (tiny by default; pass `--random-250m` to
 *   also generate and check the 250 M Q8_0 and F16 models, which takes a while).
 *
 * Usage: npx tsx scripts/validate-models.ts [--dir .cache/test-models] [--random-250m]
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';
import type { LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp';
import { Template } from '@huggingface/jinja';
import { ensureTestModels, TEST_MODEL_NAMES } from '../src/gguf/fixtures.js';
import type { ScriptDescription } from '../src/gguf/scripted.js';
import { writeRandomModel } from '../src/gguf/random.js';
import { readGgufFile } from '../src/gguf/reader.js';
import { spmVocabFromMetadata } from '../src/gguf/vocab.js';
import type { RandomModelOptions } from '../src/gguf/random.js';

const args = process.argv.slice(2);
const dirArg = args.indexOf('--dir');
const dir = dirArg >= 0 ? args[dirArg + 1]! : '.cache/test-models';
const big = args.includes('--random-250m');

let failures = 0;
function check(ok: boolean, what: string): void {
  if (!ok) failures++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
}

async function generate(
  seq: LlamaContextSequence,
  model: LlamaModel,
  prompt: readonly number[],
  options: { temperature: number; seed?: number },
  limit: number,
): Promise<{ tokens: number[]; stop: number | undefined }> {
  await seq.clearHistory();
  const tokens: number[] = [];
  let stop: number | undefined;
  const it = seq.evaluate([...prompt] as Token[], {
    temperature: options.temperature,
    ...(options.seed === undefined ? {} : { seed: options.seed }),
    topK: 0,
    topP: 1,
    minP: 0,
    yieldEogToken: true,
  });
  for await (const t of it) {
    if (model.isEogToken(t)) {
      stop = t;
      break;
    }
    tokens.push(t);
    if (tokens.length >= limit) break;
  }
  await it.return();
  return { tokens, stop };
}

async function main(): Promise<void> {
  await mkdir(dir, { recursive: true });
  const t0 = performance.now();
  const models = await ensureTestModels(dir);
  console.log(`fixtures ready in ${(performance.now() - t0).toFixed(0)} ms in ${dir}`);

  const llama = await getLlama({
    gpu: false,
    build: 'never',
    usePrebuiltBinaries: true,
    skipDownload: true,
    progressLogs: false,
    logLevel: LlamaLogLevel.error,
    maxThreads: 1,
  });

  for (const name of TEST_MODEL_NAMES) {
    const { path, description } = models[name];
    const model = await llama.loadModel({ modelPath: path });
    const context = await model.createContext({ contextSize: 8192, sequences: 1, threads: 1 });
    const seq = context.getSequence();
    console.log(`\n== ${name} (vocab ${description.nVocab}, n_embd ${description.nEmbd})`);
    for (const s of Object.values(description.scripts) as ScriptDescription[]) {
      const bos = description.addBos ? [model.tokens.bos!] : [];
      const tokenized = [...bos, ...model.tokenize(s.prompt, true)];
      check(tokenized.join() === s.promptTokens.join(), `${name}/${s.name}: llama.cpp tokenizes the prompt to promptTokens (${s.promptTokens.length} tokens)`);
      const g = await generate(seq, model, s.promptTokens, { temperature: 0 }, s.greedy.length + 8);
      const same = g.tokens.join() === s.greedy.join() && g.stop === s.stop;
      check(same, `${name}/${s.name}: greedy == script (${s.greedy.length} tokens, stop ${s.stop})`);
      if (!same) {
        console.log('   got     ', JSON.stringify(model.detokenize(g.tokens as Token[], true)), 'stop', g.stop);
        console.log('   expected', JSON.stringify(s.greedyText));
      }
      check(model.detokenize(s.greedy as Token[], true) === s.greedyText, `${name}/${s.name}: llama.cpp detokenizes greedy to greedyText`);
      const canonical = [...bos, ...model.tokenize(s.prompt + s.greedyText, true)].join() === [...s.promptTokens, ...s.greedy].join();
      console.log(`     prompt+greedy text re-tokenizes to the same tokens: ${canonical}`);

      const outcomes = new Set(s.outcomes.map((o) => o.tokens.join()));
      const seen = new Map<string, number>();
      const varied = new Set<number>();
      for (let seed = 1; seed <= 20; seed++) {
        const r = await generate(seq, model, s.promptTokens, { temperature: 1, seed }, s.greedy.length + 16);
        const key = r.tokens.join();
        seen.set(key, (seen.get(key) ?? 0) + 1);
        if (!outcomes.has(key) || r.stop !== s.stop) {
          check(false, `${name}/${s.name}: seed ${seed} gave an undescribed continuation ${JSON.stringify(model.detokenize(r.tokens as Token[], true))}`);
        }
        // Which greedy positions differed (first divergence)?
        const first = r.tokens.findIndex((t, i) => t !== s.greedy[i]);
        if (first >= 0) varied.add(first);
      }
      const branchIdx = new Set(s.branches.map((b) => b.index));
      const onlyBranches = [...varied].every((i) => branchIdx.has(i));
      check(onlyBranches && seen.size <= Math.max(1, s.outcomes.length), `${name}/${s.name}: temperature 1 x 20 seeds: ${seen.size} distinct continuation(s) of ${s.outcomes.length} described; first divergences at [${[...varied].sort((a, b) => a - b).join(', ')}], near ties at [${[...branchIdx].join(', ')}]`);
      for (const b of s.branches) {
        const counts = b.choices.map((c) => {
          let n = 0;
          for (const [k, v] of seen) {
            const toks = k === '' ? [] : k.split(',').map(Number);
            // the branch position in this outcome may shift when earlier alternatives are longer; count by presence
            if (toks.includes(c.token)) n += v;
          }
          return `${c.piece}×${n}`;
        });
        console.log(`     near tie at greedy[${b.index}] after "${model.detokenize([b.after as Token], true)}": ${counts.join(' vs ')}`);
      }
    }

    {
      // Any unscripted last token ends generation at once, greedy or sampled.
      const prompt = [model.tokens.bos!, ...model.tokenize('zzz qqq', true)];
      const stops = new Set<number | undefined>();
      for (let seed = 0; seed <= 20; seed++) {
        const r = await generate(seq, model, prompt, seed === 0 ? { temperature: 0 } : { temperature: 1, seed }, 4);
        stops.add(r.tokens.length === 0 ? r.stop : -1);
      }
      check(stops.size === 1 && stops.has(description.eos), `${name}: an unscripted prompt gets EOS at once (greedy and 20 seeds at temperature 1)`);
    }

    if (name === 'two-turn') {
      // The flag head over long prompts: filler user turns before the real prompts.
      const filler = (n: number): string => `<|im_start|>user\n${'What is the weather in Paris? '.repeat(n)}<|im_end|>\n`;
      for (const n of [30, 700]) {
        for (const s of Object.values(description.scripts)) {
          const prompt = [model.tokens.bos!, ...model.tokenize(filler(n) + s.prompt, true)];
          const r = await generate(seq, model, prompt, { temperature: 0 }, s.greedy.length + 8);
          check(r.tokens.join() === s.greedy.join() && r.stop === s.stop, `two-turn/${s.name} after ${prompt.length - s.promptTokens.length} filler tokens (prompt ${prompt.length} tokens): greedy == script`);
        }
      }
    }
    if (name === 'demo') {
      const tpl = new Template(description.chatTemplate!);
      const user = { role: 'user', content: 'What is the weather in Paris?' };
      const call = {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } }],
      };
      const result = { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 18, "condition": "sunny"}' };
      const r1 = tpl.render({ messages: [user], add_generation_prompt: true });
      const r2 = tpl.render({ messages: [user, call, result], add_generation_prompt: true });
      check(r1 === description.scripts.turn1!.prompt, 'demo: chat template renders the turn-1 prompt');
      check(r2 === description.scripts.turn2!.prompt, 'demo: chat template renders the turn-2 prompt');
      const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
      for (const [label, messages, expected] of [
        ['turn 1 with tools', [user], description.scripts.turn1!],
        ['turn 2 with tools', [user, call, result], description.scripts.turn2!],
      ] as const) {
        const text = tpl.render({ messages: [...messages], tools, add_generation_prompt: true });
        const prompt = [model.tokens.bos!, ...model.tokenize(text, true)];
        const r = await generate(seq, model, prompt, { temperature: 0 }, expected.greedy.length + 8);
        const ok = r.tokens.join() === expected.greedy.join() && r.stop === expected.stop;
        check(ok, `demo: ${label} (system prompt with tools, ${prompt.length} tokens): greedy == script`);
        if (!ok) console.log('   got', JSON.stringify(model.detokenize(r.tokens as Token[], true)), 'stop', r.stop);
      }
    }
    await context.dispose();
    await model.dispose();
  }

  // The TypeScript SentencePiece tokenizer against llama.cpp's, on real and generated vocabularies.
  const texts = [
    'Hello world! The quick brown fox jumps over the lazy dog.',
    '  leading spaces, trailing spaces  ',
    'Unicode: héllo wörld 日本語 🦙 naïve café',
    'code: function f(x) { return x * 2; } // ok\n\ttabs',
    '<s>specials</s> <tool_call>{"name": "x"}</tool_call> <|im_start|>user\nhi<|im_end|>',
    'What is the weather in Paris? feruli vase lapuna',
  ];
  const vocabFiles = [
    '../shared/models/llama-2-tiny-random.gguf',
    models['demo'].path,
    models['long-script'].path,
    join(dir, 'tiny-q8_0.gguf'),
  ];
  await writeRandomModel(join(dir, 'tiny-q8_0.gguf'), { preset: 'tiny', type: 'Q8_0' });
  for (const file of vocabFiles) {
    const header = await readGgufFile(file);
    const vocab = spmVocabFromMetadata(header.metadata);
    const model = await llama.loadModel({ modelPath: file, vocabOnly: true });
    let same = 0;
    let total = 0;
    for (const text of texts) {
      for (const parseSpecial of [true, false]) {
        total++;
        const ours = vocab.tokenize(text, { addSpecial: false, parseSpecial });
        const theirs = model.tokenize(text, parseSpecial);
        if (ours.join() === theirs.join()) same++;
        else console.log(`   differs on ${JSON.stringify(text)} (parseSpecial ${parseSpecial}):\n     ours   ${ours.join(' ')}\n     theirs ${theirs.join(' ')}`);
        const back = vocab.detokenize(theirs, parseSpecial);
        const theirBack = model.detokenize(theirs, parseSpecial);
        if (back !== theirBack) console.log(`   detokenize differs: ${JSON.stringify(back)} vs ${JSON.stringify(theirBack)}`);
      }
    }
    check(same === total, `SpmVocab tokenizes like llama.cpp on ${file.split('/').pop()} (${vocab.size} tokens): ${same}/${total} texts`);
    await model.dispose();
  }

  const randoms: Array<[string, RandomModelOptions]> = [
    ['tiny-q8_0', { preset: 'tiny', type: 'Q8_0' }],
    ['tiny-f16', { preset: 'tiny', type: 'F16' }],
  ];
  if (big) {
    randoms.push(['random-250m-q8_0', { preset: '250m', type: 'Q8_0' }]);
    randoms.push(['random-250m-f16', { preset: '250m', type: 'F16' }]);
  }
  for (const [label, options] of randoms) {
    const path = join(dir, `${label}.gguf`);
    const t = performance.now();
    const info = await writeRandomModel(path, options);
    const ms = performance.now() - t;
    console.log(`\n== ${label}: ${info.parameterCount.toLocaleString('en')} params, ${(info.fileSize / 1e6).toFixed(1)} MB, written in ${(ms / 1000).toFixed(1)} s`);
    const model = await llama.loadModel({ modelPath: path });
    const context = await model.createContext({ contextSize: 512, sequences: 1, threads: 2 });
    const seq = context.getSequence();
    const prompt = [model.tokens.bos!, ...model.tokenize('Hello world, this is a test.', false)];
    const t1 = performance.now();
    const r = await generate(seq, model, prompt, { temperature: 0 }, 16);
    const gen = performance.now() - t1;
    check(r.tokens.length > 0 || r.stop !== undefined, `${label}: loads and decodes (${r.tokens.length} tokens in ${gen.toFixed(0)} ms: ${JSON.stringify(model.detokenize(r.tokens as Token[]).slice(0, 60))})`);
    await context.dispose();
    await model.dispose();
  }

  await llama.dispose();
  console.log(`\n${failures === 0 ? 'all checks passed' : `${failures} check(s) failed`}`);
  process.exitCode = failures === 0 ? 0 : 1;
}

await main();
