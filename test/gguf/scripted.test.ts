import { readFile, stat } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestModel, ensureTestModels, TEST_MODEL_NAMES, testModelSpec } from '../../src/gguf/fixtures.js';
import type { TestModel, TestModelName } from '../../src/gguf/fixtures.js';
import { readGgufFile } from '../../src/gguf/reader.js';
import { buildScriptedModel } from '../../src/gguf/scripted.js';
import type { ScriptedModelSpec } from '../../src/gguf/scripted.js';
import { sp } from '../../src/gguf/vocab.js';
import { encodeGguf } from '../../src/gguf/writer.js';
import { normalize, tempDir } from './helpers.js';
import { F64_UNIT_ROUNDOFF, expectWithin, scriptedGreedyLogprobFloor, scriptedLogprobTolerance, scriptedProbabilityTolerance } from '../helpers/tolerance.js';

let dir = '';
let cleanup: () => Promise<void> = async () => {};
let models: Record<TestModelName, TestModel>;
beforeAll(async () => {
  ({ dir, cleanup } = await tempDir());
  models = await ensureTestModels(dir);
});
afterAll(() => cleanup());

const ids = (m: TestModel, pieces: string[]): number[] => pieces.map((p) => m.description.tokens[p]!);

describe('ensureTestModels()', () => {
  it('writes every fixture and its JSON description', async () => {
    for (const name of TEST_MODEL_NAMES) {
      const m = models[name];
      expect(m.path).toBe(`${dir}/${name}.gguf`);
      expect(m.description.path).toBe(m.path);
      const json = JSON.parse(await readFile(`${dir}/${name}.json`, 'utf8'));
      expect(json).toEqual(JSON.parse(JSON.stringify(m.description)));
    }
  });

  it('does not rewrite identical files and gives identical bytes on every run', async () => {
    const before = await stat(models['near-tie'].path);
    const again = await ensureTestModels(dir, ['near-tie']);
    const after = await stat(again['near-tie'].path);
    expect(after.mtimeMs).toBe(before.mtimeMs);
    expect(new Uint8Array(await readFile(models['near-tie'].path))).toEqual(encodeGguf(buildTestModel('near-tie').gguf));
  });

  it.each(TEST_MODEL_NAMES)('round-trips %s through the reader: metadata and tensor infos as written', async (name) => {
    const built = buildTestModel(name);
    const file = await readGgufFile(models[name].path);
    const written = built.gguf.metadata as Array<[string, import('../../src/gguf/types.js').GgufValue]>;
    expect([...file.metadata.keys()]).toEqual(written.map(([k]) => k));
    for (const [key, value] of written) expect(normalize(file.metadata.get(key)!)).toEqual(normalize(value));
    expect(file.tensors.map((t) => [t.name, t.shape, t.type])).toEqual(built.gguf.tensors.map((t) => [t.name, [...t.shape], t.type]));
    expect(file.metadata.get('general.architecture')!.value).toBe('llama');
    expect(file.metadata.get('llama.block_count')!.value).toBe(1);
    const d = models[name].description;
    expect(file.metadata.get('llama.embedding_length')!.value).toBe(d.nEmbd);
    expect((file.metadata.get('tokenizer.ggml.tokens')!.value as string[]).length).toBe(d.nVocab);
    expect(file.metadata.get('tokenizer.ggml.eos_token_id')!.value).toBe(d.eos);
    expect(file.metadata.has('tokenizer.chat_template')).toBe(name === 'demo');
  });

  it('builds each fixture well under a second', () => {
    for (const name of TEST_MODEL_NAMES) {
      const t = performance.now();
      buildTestModel(name);
      expect(performance.now() - t).toBeLessThan(2000);
    }
  });
});

describe('fixture descriptions', () => {
  it.each(TEST_MODEL_NAMES)('%s: every script ends with EOS, starts its prompt with BOS and has outcomes summing to 1', (name) => {
    const d = models[name].description;
    for (const s of Object.values(d.scripts)) {
      expect(s.promptTokens[0]).toBe(d.bos);
      expect(s.stop).toBe(d.eos);
      expect(d.eog).toContain(d.eos);
      expect(s.greedy.length).toBeGreaterThan(0);
      expect(s.outcomes[0]!.tokens).toEqual(s.greedy);
      const total = s.outcomes.reduce((a, o) => a + o.probability, 0);
      expect(total).toBeGreaterThan(0.999);
      expect(total).toBeLessThan(1.000001);
      expect(s.canonical).toBe(true);
    }
  });

  it('single-marker: single-token markers with near ties on both wrappers and in the payload', () => {
    const m = models['single-marker'];
    const s = m.description.scripts.main!;
    expect(s.prompt).toBe('Weather in Paris please:');
    expect(s.greedyText).toBe(' Let me check that.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>');
    expect(m.description.markers.toolCallStart!.tokens).toEqual([m.description.tokens['<tool_call>']]);
    expect(m.description.special['<tool_call>']!.type).toBe('USER_DEFINED');
    expect(s.branches.map((b) => [b.index, b.choices.map((c) => c.piece)])).toEqual([
      [4, ['<tool_call>', '▁Calling:']],
      [9, ['▁"Paris"', '▁"Lyon"']],
      [11, ['</tool_call>', '▁Done.']],
    ]);
    // the simulator's float64 forward pass of the float32 weights (test/helpers/tolerance.ts)
    const sim = { ...m.description, unitRoundoff: F64_UNIT_ROUNDOFF };
    for (const b of s.branches) {
      expectWithin(b.choices[0]!.probability, 0.55, scriptedProbabilityTolerance(0.55, sim));
      expectWithin(b.choices[1]!.probability, 0.45, scriptedProbabilityTolerance(0.45, sim));
    }
    expect(s.outcomes).toHaveLength(8);
    expect(s.outcomes.map((o) => o.text)).toContain(' Let me check that. Calling:{"name": "get_weather", "arguments": {"city": "Lyon"}} Done.');
  });

  it('multi-marker: the start marker is four canonical tokens and the script writes a false start first', () => {
    const m = models['multi-marker'];
    const d = m.description;
    const s = d.scripts.main!;
    const start = ids(m, ['<', 'tool', '_call', '>']);
    expect(d.markers.toolCallStart!.tokens).toEqual(start);
    expect(d.markers.falseStart!.tokens).toEqual(ids(m, ['<', 'tool', 'box']));
    const at = (seq: readonly number[], sub: number[]): number =>
      seq.findIndex((_, i) => sub.every((t, j) => seq[i + j] === t));
    expect(at(s.greedy, d.markers.falseStart!.tokens as number[])).toBe(4);
    expect(at(s.greedy, start)).toBe(10);
    expect(s.greedyText).toBe(' First check the kit:<toolbox found. Now calling:<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>');
    expect(d.flags).toEqual([{ flag: d.tokens.box, trigger: d.tokens.tool, without: d.tokens.box, with: d.tokens._call }]);
    expect(s.branches).toEqual([]);
  });

  it('payload-marker: argument markers with a near tie inside and near ties on the wrapper', () => {
    const m = models['payload-marker'];
    const s = m.description.scripts.main!;
    expect(s.greedyText).toBe(' Booking now.<tool_call>book_table<arg>{"party": 4}</arg></tool_call>');
    expect(s.branches.map((b) => b.choices.map((c) => c.piece))).toEqual([
      ['<tool_call>', '▁Booking:'],
      ['▁4}', '▁5}'],
      ['</tool_call>', '▁Thanks.'],
    ]);
    expect(m.description.markers.argStart!.tokens).toEqual([m.description.tokens['<arg>']]);
  });

  it('near-tie: one branch, 55 % / 45 %', () => {
    const s = models['near-tie'].description.scripts.main!;
    expect(s.greedyText).toBe(' there lived a cat named Tom.');
    expect(s.branches).toHaveLength(1);
    expect(s.outcomes.map((o) => o.text)).toEqual([' there lived a cat named Tom.', ' there lived a dog named Tom.']);
    // an outcome's probability is the branch's times every other step's (each ≥ e^floor), in the
    // simulator's float64 forward pass of the float32 weights (test/helpers/tolerance.ts)
    const sim = { ...models['near-tie'].description, unitRoundoff: F64_UNIT_ROUNDOFF };
    const logTolerance = scriptedLogprobTolerance(sim) - (s.greedy.length + 1) * scriptedGreedyLogprobFloor(sim);
    s.outcomes.forEach((o, i) => {
      const p = [0.55, 0.45][i]!;
      expectWithin(o.probability, p, p * Math.expm1(logTolerance), o.text);
    });
  });

  it.each(['two-turn', 'demo'] as const)('%s: a tool call before the tool result, an answer after it', (name) => {
    const d = models[name].description;
    const t1 = d.scripts.turn1!;
    const t2 = d.scripts.turn2!;
    expect(t1.greedyText).toBe('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>');
    expect(t2.greedyText).toBe('The weather in Paris is sunny and 18°C.');
    expect(JSON.parse(t1.greedyText.slice('<tool_call>'.length, -'</tool_call>'.length))).toEqual({
      name: 'get_weather',
      arguments: { city: 'Paris' },
    });
    const flag = d.tokens['<tool_response>']!;
    expect(t1.promptTokens).not.toContain(flag);
    expect(t2.promptTokens).toContain(flag);
    expect(t1.promptTokens.at(-1)).toBe(t2.promptTokens.at(-1));
    expect(d.eos).toBe(d.tokens['<|im_end|>']);
    expect(d.special['<|im_start|>']!.type).toBe('CONTROL');
    expect(t2.prompt.startsWith(t1.prompt + t1.greedyText)).toBe(true);
    expect(t1.branches).toEqual([]);
    expect(t2.branches).toEqual([]);
  });

  it('long-script: about 300 tokens that re-tokenize to themselves', () => {
    const built = buildTestModel('long-script');
    const s = built.description.scripts.main!;
    expect(s.greedy.length).toBe(300);
    expect(new Set(s.greedy).size).toBe(300);
    expect(s.greedyText).toContain(' Hello world! Stop here please.');
    expect(s.greedyText.startsWith(' The quick brown fox jumps over lazy dogs.')).toBe(true);
    expect(s.greedyText.endsWith(' This is the end.')).toBe(true);
    expect(built.vocab.tokenize(s.prompt + s.greedyText)).toEqual([...s.promptTokens, ...s.greedy]);
  });
});

describe('buildScriptedModel()', () => {
  const base: ScriptedModelSpec = { name: 't', scripts: [{ name: 'a', prompt: sp('Hi'), continuation: sp(' one| two') }] };

  it('throws when a token would need two successors', () => {
    expect(() =>
      buildScriptedModel({ ...base, scripts: [...base.scripts, { name: 'b', prompt: sp('Yo'), continuation: sp(' one| three') }] }),
    ).toThrow('Token "▁one" has several successors ("▁two", "▁three"); use distinct pieces, a near tie or a flag rule');
  });

  it('throws when a prompt does not tokenize to its pieces', () => {
    expect(() =>
      buildScriptedModel({ ...base, scripts: [{ name: 'a', prompt: ['a', 'b'], continuation: sp(' one') }], extraWords: ['ab'] }),
    ).toThrow('Script "a": prompt "ab" tokenizes to [<s> | ab], not to its pieces');
  });

  it('throws when a flag candidate also follows another token', () => {
    expect(() =>
      buildScriptedModel({
        name: 't',
        scripts: [
          { name: 'a', prompt: sp('Go'), continuation: sp(' x| y| z') },
          { name: 'b', prompt: sp('Stop'), continuation: sp(' y| z') },
        ],
        flags: [{ flag: '▁z', trigger: '▁x', without: '▁y', with: '▁w' }],
        extraWords: sp(' w'),
      }),
    ).toThrow('Flag candidate "▁y" must follow only its trigger');
  });

  it('is deterministic and depends on the seed', () => {
    const a = encodeGguf(buildScriptedModel(base).gguf);
    expect(encodeGguf(buildScriptedModel(base).gguf)).toEqual(a);
    expect(encodeGguf(buildScriptedModel({ ...base, seed: 2 }).gguf)).not.toEqual(a);
  });

  it('describes a spec of your own', () => {
    const d = buildScriptedModel(testModelSpec('near-tie')).description;
    expect(d.scripts.main!.greedyPieces).toEqual(sp(' there| lived| a| cat| named| Tom.'));
  });
});
