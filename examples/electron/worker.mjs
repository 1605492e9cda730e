// Utility process: loads llamux (its addon and libraries come from app.asar.unpacked: see
// asarUnpack in package.json) and runs one context. Messages from main: load, generate, stop, quit.
import { loadModel, setLogger } from 'llamux';

const port = process.parentPort;
let model;
let ctx;
let abort;

setLogger('warn', (level, message) => port.postMessage({ type: 'log', level, message }));

port.on('message', async ({ data }) => {
  try {
    if (data.type === 'load') {
      // gpuLayers 'auto' (the default): as many layers as fit in the GPU's free memory; the plan
      // and why are on model.fit (a warning comes through the logger when it runs split or on the CPU).
      model = await loadModel(data.modelPath, { onProgress: (p) => port.postMessage({ type: 'progress', value: p }) });
      ctx = await model.createContext();
      port.postMessage({ type: 'ready', fit: model.fit && { mode: model.fit.mode, gpuLayers: model.fit.gpuLayers, totalLayers: model.fit.totalLayers, contextSize: model.fit.contextSize, reasons: model.fit.reasons } });
    } else if (data.type === 'generate') {
      if (!ctx) throw new Error('no model loaded');
      abort = new AbortController();
      for await (const ev of ctx.generate({ prompt: data.prompt, maxTokens: data.maxTokens ?? 256, signal: abort.signal })) {
        if (ev.type === 'text') port.postMessage({ type: 'text', text: ev.text });
      }
      port.postMessage({ type: 'done' });
    } else if (data.type === 'stop') {
      abort?.abort();
    } else if (data.type === 'quit') {
      abort?.abort();
      await ctx?.dispose();
      await model?.dispose();
      process.exit(0);
    }
  } catch (e) {
    port.postMessage({ type: 'error', message: e instanceof Error ? `${e.name}: ${e.message}` : String(e) });
  }
});
