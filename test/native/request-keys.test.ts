import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native, type NativeContext, type NativeEvent, type NativeRequest } from '../../src/native/binding.js';
import { loadModel, type Model } from '../../src/index.js';
import { contextConfig, endSessionCommand, prefillRequest } from '../../src/native/request.js';
import { ContextOptionsSchema } from '../../src/options.js';
import { tinyModelPath } from '../helpers/paths.js';

// The mappers in src/native/request.ts send every key; the native side holds no defaults, so a
// missing or mistyped key is a TypeError that names it (a bug between our own layers).
describe('native Context: required keys', () => {
  let model: Model;
  let ctx: NativeContext;
  const config = () => contextConfig(ContextOptionsSchema.parse({ contextSize: 256 }), undefined);

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    let ready!: () => void;
    const isReady = new Promise<void>((r) => (ready = r));
    ctx = new native.Context(model.nativeHandle(), config(), (events: NativeEvent[]) => {
      if (events.some((e) => e.type === 'ready')) ready();
    });
    await isReady;
  });
  afterAll(async () => {
    await ctx.close();
    await model.dispose();
  });

  it('new Context() names a missing or mistyped config key', () => {
    const noop = () => {};
    for (const [key, value, expected] of [
      ['contextSize', undefined, 'a number'],
      ['unifiedKv', 1, 'a boolean'],
      ['cacheDir', undefined, 'a string'],
      ['markerStart', [1, 2], 'an Int32Array'],
    ] as const) {
      const o: Record<string, unknown> = { ...config() };
      if (value === undefined) delete o[key];
      else o[key] = value;
      expect(() => new native.Context(model.nativeHandle(), o as never, noop)).toThrow(new TypeError(`Expected key "${key}" to be ${expected}`));
    }
  });

  it('submit() names a missing or mistyped request key', () => {
    const complete = prefillRequest(1, Int32Array.from([1, 2, 3]), undefined);
    for (const [key, value, expected] of [
      ['emitTokenIds', undefined, 'a boolean'],
      ['detectToolCalls', 'yes', 'a boolean'],
      ['promptTokens', 'hello', 'an Int32Array'],
      ['seed', undefined, 'a number'],
      ['grammar', undefined, 'a string'],
      ['logitBiasValues', undefined, 'a Float32Array'],
      ['expectCommitted', undefined, 'an Int32Array'],
    ] as const) {
      const o: Record<string, unknown> = { ...complete };
      if (value === undefined) delete o[key];
      else o[key] = value;
      expect(() => ctx.submit(o as unknown as NativeRequest)).toThrow(new TypeError(`Expected key "${key}" to be ${expected}`));
    }
  });

  it('sessionCommand() names a missing key', () => {
    const o: Record<string, unknown> = { ...endSessionCommand(2, { id: 's', ttlMs: undefined, handle: 1 }) };
    delete o.from;
    expect(() => ctx.sessionCommand(o as never)).toThrow(new TypeError('Expected key "from" to be a number'));
  });
});
