import { describe, expect, it } from 'vitest';
import { HubError, isLlamuxError, parseModelReference } from '../../src/index.js';
import { modelGroups, pickMmproj, quantTagOf, resolveQuant, safeRelativePath, splitParts } from '../../src/hub/reference.js';

const thrown = (fn: () => unknown): unknown => {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a throw');
};

describe('parseModelReference()', () => {
  it('reads org/repo, org/repo:QUANT, org/repo/file.gguf and the hf prefixes', () => {
    expect(parseModelReference('Qwen/Qwen3-4B-GGUF')).toEqual({ kind: 'hf', repo: 'Qwen/Qwen3-4B-GGUF' });
    expect(parseModelReference('Qwen/Qwen3-4B-GGUF:q4_k_m')).toEqual({ kind: 'hf', repo: 'Qwen/Qwen3-4B-GGUF', tag: 'q4_k_m' });
    expect(parseModelReference('unsloth/GLM-4.5-GGUF/Q4_K_M/GLM-4.5-Q4_K_M-00001-of-00005.gguf')).toEqual({
      kind: 'hf',
      repo: 'unsloth/GLM-4.5-GGUF',
      file: 'Q4_K_M/GLM-4.5-Q4_K_M-00001-of-00005.gguf',
    });
    expect(parseModelReference('hf://a/b:Q8_0')).toEqual({ kind: 'hf', repo: 'a/b', tag: 'Q8_0' });
    expect(parseModelReference('hf.co/a/b')).toEqual({ kind: 'hf', repo: 'a/b' });
    expect(parseModelReference('  a/b  ')).toEqual({ kind: 'hf', repo: 'a/b' });
  });

  it('reads URLs, and a resolve URL of the hub as a hub file with its revision', () => {
    expect(parseModelReference('https://example.com/models/x.gguf')).toEqual({ kind: 'url', url: 'https://example.com/models/x.gguf' });
    expect(parseModelReference('https://huggingface.co/a/b/resolve/main/sub/m-Q4_0.gguf')).toEqual({
      kind: 'hf',
      repo: 'a/b',
      revision: 'main',
      file: 'sub/m-Q4_0.gguf',
      endpoint: 'https://huggingface.co',
    });
    expect(parseModelReference('http://127.0.0.1:9/mirror/a/b/blob/v1/m.gguf', 'http://127.0.0.1:9/mirror')).toMatchObject({ kind: 'hf', repo: 'a/b', revision: 'v1', file: 'm.gguf', endpoint: 'http://127.0.0.1:9/mirror' });
  });

  it('refuses malformed references with INVALID_ARGUMENT naming the problem', () => {
    const cases: Array<[string, RegExp]> = [
      ['', /it is empty/],
      ['justaname', /needs an organisation and a repository/],
      ['a//b', /needs an organisation/],
      ['a/b:', /"" is not a quant tag/],
      ['a/b:Q4 K', /is not a quant tag/],
      ['../b', /"\.\." is not a repository name/],
      ['a/b/model.bin', /is not a \.gguf file/],
      ['a/b/../../etc/x.gguf', /contains "\.\."/],
      ['ftp://host/x.gguf', /only http and https URLs/],
      ['https://user:pw@host/x.gguf', /credentials in the URL/],
      ['https://host/', /does not name a file/],
    ];
    for (const [ref, why] of cases) {
      const e = thrown(() => parseModelReference(ref));
      expect(isLlamuxError(e, 'INVALID_ARGUMENT'), ref).toBe(true);
      expect((e as Error).message, ref).toMatch(why);
      expect((e as Error).message).toContain('Expected org/repo, org/repo:QUANT, org/repo/file.gguf or an http(s) URL');
    }
  });
});

describe('safeRelativePath()', () => {
  it('refuses "..", absolute paths, backslashes, drive letters and empty segments', () => {
    for (const [name, why] of [
      ['../x.gguf', '".."'],
      ['a/../../x.gguf', '".."'],
      ['/etc/passwd', 'absolute'],
      ['C:/x.gguf', 'absolute'],
      ['a\\..\\x.gguf', 'backslash'],
      ['a//x.gguf', 'empty'],
      ['./x.gguf', '"."'],
      ['x\0.gguf', 'NUL'],
    ] as const) {
      const e = thrown(() => safeRelativePath(name));
      expect(isLlamuxError(e, 'INVALID_ARGUMENT'), name).toBe(true);
      expect((e as Error).message, name).toContain(why);
    }
    expect(safeRelativePath('Q4_K_M/m-Q4_K_M.gguf')).toBe('Q4_K_M/m-Q4_K_M.gguf');
  });
});

const REPO = [
  'README.md',
  'Model-7B-Q4_K_M.gguf',
  'Model-7B-q8_0.gguf',
  'Model-7B.IQ2_XXS.gguf',
  'Model-7B-UD-Q4_K_XL.gguf',
  'BF16/Model-7B-BF16-00001-of-00003.gguf',
  'BF16/Model-7B-BF16-00002-of-00003.gguf',
  'BF16/Model-7B-BF16-00003-of-00003.gguf',
  'mmproj-Model-7B-f16.gguf',
  'mmproj-Model-7B-Q8_0.gguf',
  'Model-7B-MTP-Q8_0.gguf',
  'imatrix_unsloth.gguf',
];

describe('quant tags', () => {
  it('reads the tag at the end of a stem, after - . or _, else from the folder', () => {
    expect(quantTagOf('Model-7B-Q4_K_M.gguf')).toBe('Q4_K_M');
    expect(quantTagOf('Model-7B-q8_0.gguf')).toBe('Q8_0');
    expect(quantTagOf('Model-7B.IQ2_XXS.gguf')).toBe('IQ2_XXS');
    expect(quantTagOf('Model-7B-UD-Q4_K_XL.gguf')).toBe('UD-Q4_K_XL');
    expect(quantTagOf('BF16/Model-7B-BF16-00002-of-00003.gguf')).toBe('BF16');
    expect(quantTagOf('Q5_K_M/model-00001-of-00002.gguf')).toBe('Q5_K_M');
    expect(quantTagOf('model.gguf')).toBeUndefined();
  });

  it('groups split parts (part 1 first) and leaves projectors, drafts and imatrix out', () => {
    const groups = modelGroups(REPO);
    expect(groups.map((g) => g.tag).sort()).toEqual(['BF16', 'IQ2_XXS', 'Q4_K_M', 'Q8_0', 'UD-Q4_K_XL']);
    expect(groups.find((g) => g.tag === 'BF16')!.files).toEqual(REPO.slice(5, 8));
  });

  it('resolves a tag case-insensitively, Q4_K_XL to UD-Q4_K_XL, and no tag to Q4_K_M', () => {
    expect(resolveQuant('o/r', REPO, 'q8_0').files).toEqual(['Model-7B-q8_0.gguf']);
    expect(resolveQuant('o/r', REPO, 'Q4_K_XL').files).toEqual(['Model-7B-UD-Q4_K_XL.gguf']);
    expect(resolveQuant('o/r', REPO, 'bf16').files).toHaveLength(3);
    expect(resolveQuant('o/r', REPO, undefined).files).toEqual(['Model-7B-Q4_K_M.gguf']);
    expect(resolveQuant('o/r', ['only-one.gguf', 'README.md'], undefined).files).toEqual(['only-one.gguf']);
  });

  it('an unknown tag is MODEL_NOT_FOUND listing the tags the repository has', () => {
    const e = thrown(() => resolveQuant('o/r', REPO, 'Q3_K_S')) as HubError;
    expect(e).toBeInstanceOf(HubError);
    expect(e.code).toBe('MODEL_NOT_FOUND');
    expect(e.message).toBe('o/r has no quant "Q3_K_S"; available: BF16, IQ2_XXS, Q4_K_M, Q8_0, UD-Q4_K_XL');
    expect(e.available).toEqual(['BF16', 'IQ2_XXS', 'Q4_K_M', 'Q8_0', 'UD-Q4_K_XL']);
    const none = thrown(() => resolveQuant('o/r', ['a-Q2_K.gguf', 'b-Q3_K_S.gguf'], undefined)) as HubError;
    expect(none.message).toMatch(/several models and none of the default quants .*; name one: o\/r:Q2_K, o\/r:Q3_K_S$/);
    const ambiguous = thrown(() => resolveQuant('o/r', ['a-Q8_0.gguf', 'b-Q8_0.gguf'], 'Q8_0')) as HubError;
    expect(ambiguous.message).toMatch(/quant Q8_0 names 2 models \(a-Q8_0\.gguf, b-Q8_0\.gguf\)/);
  });

  it('lists every part of a split GGUF and refuses one with a part missing', () => {
    expect(splitParts('o/r', 'BF16/Model-7B-BF16-00001-of-00003.gguf', REPO)).toEqual(REPO.slice(5, 8));
    const e = thrown(() => splitParts('o/r', 'BF16/Model-7B-BF16-00001-of-00003.gguf', REPO.filter((p) => !p.includes('00002')))) as HubError;
    expect(e.code).toBe('MODEL_NOT_FOUND');
    expect(e.message).toContain('part BF16/Model-7B-BF16-00002-of-00003.gguf is missing');
  });

  it('picks the F16 projector first', () => {
    expect(pickMmproj(REPO)).toBe('mmproj-Model-7B-f16.gguf');
    expect(pickMmproj(['mmproj-x-Q8_0.gguf'])).toBe('mmproj-x-Q8_0.gguf');
    expect(pickMmproj(['x.gguf'])).toBeUndefined();
  });
});
