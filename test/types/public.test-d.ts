// Compile-only tests of the public types (vitest typecheck: `npx vitest run` type-checks
// test/types/*.test-d.ts; nothing here runs).
import { describe, expectTypeOf, it } from 'vitest';
import type * as llamux from '../../src/index.js';
import type {
  CacheReport,
  Context,
  FinishReason,
  GenerateEvent,
  GenerateOptions,
  GenerateResult,
  Generation,
  LlamuxError,
  LlamuxErrorCode,
  Session,
  SessionOptions,
  SessionStats,
} from '../../src/index.js';
import type { ERROR_CODES } from '../../src/index.js';
import type { NativeEvent, NativeStats } from '../../src/native/binding.js';

type NativeFinal = Extract<NativeEvent, { type: 'final' }>;

describe('public types', () => {
  it('FinishReason covers every reason a result can carry (the native ones minus rejections)', () => {
    expectTypeOf<Exclude<NativeFinal['finishReason'], 'abort' | 'error' | 'done'>>().toEqualTypeOf<FinishReason>();
    expectTypeOf<'prefill'>().toExtend<FinishReason>();
    expectTypeOf<GenerateResult['finishReason']>().toEqualTypeOf<FinishReason>();
  });

  it('cache reports use the native outcome and tier names', () => {
    expectTypeOf<NativeStats['cacheOutcome']>().toEqualTypeOf<CacheReport['outcome']>();
    expectTypeOf<Exclude<NativeStats['cacheTier'], ''>>().toEqualTypeOf<NonNullable<CacheReport['tier']>>();
  });

  it('error codes are derived from ERROR_CODES', () => {
    expectTypeOf<(typeof ERROR_CODES)[number]>().toEqualTypeOf<LlamuxErrorCode>();
    expectTypeOf<LlamuxError['code']>().toEqualTypeOf<LlamuxErrorCode>();
    expectTypeOf<'INTERNAL'>().toExtend<LlamuxErrorCode>();
    expectTypeOf<'NOT_A_CODE'>().not.toExtend<LlamuxErrorCode>();
  });

  it('a Generation is an async iterable of GenerateEvent with a result promise', () => {
    expectTypeOf<Generation>().toExtend<AsyncIterable<GenerateEvent>>();
    expectTypeOf<Generation['result']>().toEqualTypeOf<Promise<GenerateResult>>();
    expectTypeOf<Context['generate']>().parameters.toEqualTypeOf<[GenerateOptions]>();
    expectTypeOf<Extract<GenerateEvent, { type: 'final' }>['finishReason']>().toEqualTypeOf<FinishReason>();
  });

  it('sessions: createSession options, methods and stats', () => {
    expectTypeOf<Context['createSession']>().toEqualTypeOf<(options?: SessionOptions) => Session>();
    expectTypeOf<SessionOptions>().toEqualTypeOf<{ id?: string | undefined; ttlMs?: number | undefined }>();
    expectTypeOf<Session['generate']>().returns.toEqualTypeOf<Generation>();
    expectTypeOf<Session['continue']>().returns.toEqualTypeOf<Generation>();
    expectTypeOf<Session['fork']>().returns.toEqualTypeOf<Promise<Session>>();
    expectTypeOf<Session['end']>().returns.toEqualTypeOf<Promise<void>>();
    expectTypeOf<Session['stats']>().returns.toEqualTypeOf<SessionStats>();
    // generate() on a session cannot name another session.
    expectTypeOf<Parameters<Session['generate']>[0]>().not.toHaveProperty('sessionId');
  });

  it('a model, its contexts and their sessions name each other with their exact classes', () => {
    // The engine imports only ModelHandle and SessionPort (no import circle in src/); the
    // public properties still carry the classes (src/model/handle.ts, src/engine/session.ts).
    expectTypeOf<llamux.Model['createContext']>().returns.toEqualTypeOf<Promise<Context>>();
    expectTypeOf<Context['model']>().toEqualTypeOf<llamux.Model>();
    expectTypeOf<Session['context']>().toEqualTypeOf<Context>();
  });

  it('tokenize returns a Promise exactly when it is given a signal; tokenizeAsync always does', () => {
    type M = llamux.Model;
    const m = {} as M;
    expectTypeOf(m.tokenize('x')).toEqualTypeOf<Int32Array>();
    expectTypeOf(m.tokenize('x', { addSpecial: false, maxTokens: 10 })).toEqualTypeOf<Int32Array>();
    expectTypeOf(m.tokenize('x', { signal: new AbortController().signal })).toEqualTypeOf<Promise<Int32Array>>();
    expectTypeOf(m.tokenizeAsync('x', { parseSpecial: true })).toEqualTypeOf<Promise<Int32Array>>();
  });

  it('internals are not root exports', () => {
    expectTypeOf<typeof llamux>().not.toHaveProperty('alnum9');
    expectTypeOf<typeof llamux>().not.toHaveProperty('canonicalJson');
    expectTypeOf<typeof llamux>().not.toHaveProperty('interpretHandlerReturn');
    expectTypeOf<typeof llamux>().not.toHaveProperty('TOOL_RESULT_TAG');
    expectTypeOf<typeof llamux>().not.toHaveProperty('native' as never);
    expectTypeOf<typeof llamux>().toHaveProperty('loadModel');
    expectTypeOf<typeof llamux>().toHaveProperty('Session');
  });

  it('MoE placement: the load options, the plan and the placement report', () => {
    type Options = NonNullable<Parameters<typeof llamux.loadModel>[1]>;
    expectTypeOf<{ cpuMoe: true }>().toExtend<Options>();
    expectTypeOf<{ nCpuMoe: 4 }>().toExtend<Options>();
    expectTypeOf<llamux.FitDevice[]>().toExtend<NonNullable<NonNullable<Options['fit']>['devices']>>();
    expectTypeOf<'moe'>().toExtend<llamux.FitPlan['mode']>();
    expectTypeOf<llamux.FitPlan['experts']>().toEqualTypeOf<llamux.FitExpertPlan | undefined>();
    expectTypeOf<ReturnType<llamux.Model['placement']>>().toEqualTypeOf<llamux.WeightPlacement>();
  });
});
