import { describe, expect, it } from 'vitest';
import { detectMarkerPreset, loadModel, MARKER_PRESETS, tokenizeMarker } from '../../src/index.js';
import { testModel } from '../helpers/models.js';
import { tinyModelPath } from '../helpers/paths.js';

describe('tool-call marker presets', () => {
  it('detects the hermes preset from a vocabulary with a single <tool_call> token and a template that uses it', async () => {
    const model = await loadModel(testModel('demo').path);
    expect(detectMarkerPreset(model)).toBe('hermes');
    const ctx = await model.createContext({ contextSize: 1024, threads: 1 });
    expect(ctx.markers?.preset).toBe('hermes');
    expect(Array.from(ctx.markers!.start)).toEqual(Array.from(model.tokenize(MARKER_PRESETS.hermes.start, { addSpecial: false, parseSpecial: true })));
    expect(ctx.markers!.start).toHaveLength(1);
    await model.dispose();
  });

  it('tokenizes a multi-token marker as it appears mid-output (no SentencePiece space prefix)', async () => {
    const model = await loadModel(tinyModelPath, { vocabOnly: true });
    const tokens = tokenizeMarker(model, '<tool_call>');
    expect(tokens.length).toBeGreaterThan(1);
    expect(Buffer.from(model.tokenPiece(tokens[0]!)).toString()).toBe('<');
    expect(model.detokenize(Int32Array.from([...model.tokenize('x', { addSpecial: false }), ...tokens]))).toBe('x<tool_call>');
    await model.dispose();
  });

  it('leaves a model without a tool template on the plain text path', async () => {
    const model = await loadModel(tinyModelPath);
    expect(detectMarkerPreset(model)).toBeUndefined();
    const ctx = await model.createContext({ contextSize: 256, threads: 1 });
    expect(ctx.markers).toBeUndefined();
    await model.dispose();
  });

  it('takes a preset or explicit markers from loadModel as the default, and false turns them off', async () => {
    const model = await loadModel(testModel('long-script').path, { toolCallMarkers: { start: '<tool_call>', end: '</tool_call>' } });
    const ctx = await model.createContext({ contextSize: 256, threads: 1 });
    expect(ctx.markers?.start.length).toBeGreaterThan(0);
    const off = await model.createContext({ contextSize: 256, threads: 1, toolCallMarkers: false });
    expect(off.markers).toBeUndefined();
    await expect(model.createContext({ toolCallMarkers: { start: 'x' } as never })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await model.dispose();
  });
});
