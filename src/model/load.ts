// Loading a GGUF model: the file checks, gpuLayers 'auto' (src/model/fit.ts) and the native load
// on a worker thread. It hands each Model the factory of its contexts (src/engine/context.ts), so
// neither model.ts nor the engine imports the other's classes.
import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { native } from '../native/binding.js';
import { Context } from '../engine/context.js';
import { LlamuxError, abortError, fromNative } from '../errors.js';
import { ensureDefaultLogger, libraryLog } from '../logger.js';
import { modelSizesFromGguf, planFit, type FitDevice, type FitPlan } from './fit.js';
import { cpuMoeLayers, expertOverridePattern } from './moe.js';
import { DEFAULT_MEDIA_LIMITS, wrapModel, type ContextFactory, type Model } from './model.js';
import type { NativeModel } from '../native/binding.js';
import { LoadModelOptionsSchema, parseOptions, type LoadModelOptions } from '../options.js';

const newContext: ContextFactory = (model, options) => Context.create(model, options);

/**
 * Loads a GGUF model on a worker thread.
 * @throws LlamuxError MODEL_NOT_FOUND (missing path or a directory), MODEL_INVALID (not a
 *   GGUF llama.cpp can load), ABORTED (signal), INVALID_ARGUMENT (options),
 *   RPC_UNAVAILABLE (an RPC server does not answer, or dies while the model loads); with a
 *   `projector`: MODEL_NOT_FOUND (no such file), MODEL_INVALID (not a projector, corrupt, or made
 *   for another text model: its output width differs)
 * @example
 * const model = await loadModel('model.gguf', { onProgress: (p) => console.log(p) });
 */
export async function loadModel(path: string, options?: LoadModelOptions): Promise<Model> {
  const stack = new Error().stack;
  if (typeof path !== 'string' || path.length === 0) {
    throw new LlamuxError('INVALID_ARGUMENT', `Expected the model path to be a non-empty string but received ${typeof path === 'string' ? 'an empty string' : typeof path}`);
  }
  const o = parseOptions(LoadModelOptionsSchema, options, 'loadModel options');
  if (o.cpuMoe === true && o.nCpuMoe !== undefined) {
    throw new LlamuxError('INVALID_ARGUMENT', 'Invalid loadModel options: give cpuMoe (the experts of every layer) or nCpuMoe (those of the first N layers), not both');
  }
  const askedMoe = cpuMoeLayers(o);
  ensureDefaultLogger();
  const full = resolve(path);
  if (o.signal?.aborted) throw abortError(o.signal, 'Model loading');
  let info;
  try {
    info = await stat(full);
  } catch (e) {
    throw new LlamuxError('MODEL_NOT_FOUND', `No model file at "${full}"`, { cause: e });
  }
  if (info.isDirectory()) throw new LlamuxError('MODEL_NOT_FOUND', `"${full}" is a directory, not a GGUF model file`);
  if (!info.isFile()) throw new LlamuxError('MODEL_NOT_FOUND', `"${full}" is not a regular file`);
  if (info.size === 0) throw new LlamuxError('MODEL_INVALID', `"${full}" is empty (0 bytes), not a GGUF model`);

  // the projector's file first: a bad one fails before the weights load
  const projector = o.projector === undefined ? undefined : await checkProjectorFile(resolve(o.projector), o.vocabOnly);
  const abortFlag = new Int32Array(new SharedArrayBuffer(4));
  const onAbort = () => Atomics.store(abortFlag, 0, 1);
  o.signal?.addEventListener('abort', onAbort, { once: true });
  const onProgress = o.onProgress as ((p: number) => void) | undefined;
  let gpuLayers = o.gpuLayers === 'auto' ? (hasGpu() || o.rpcServers ? -1 : 0) : o.gpuLayers;
  let tensorSplit = o.tensorSplit;
  let fit: FitPlan | undefined;
  if (o.gpuLayers === 'auto' && !o.rpcServers && !o.vocabOnly) {
    fit = await planForFile(full, { ...o.fit, ...(askedMoe !== undefined ? { nCpuMoe: askedMoe } : {}) });
    if (fit) {
      gpuLayers = fit.gpuLayers;
      if (!tensorSplit && fit.tensorSplit.length > 1) tensorSplit = fit.tensorSplit;
      if (fit.warning) libraryLog('warn', `llamux: ${full}: ${fit.warning}`);
    }
  }
  // The experts' placement: as asked, else as planned (every layer's when the plan says cpuMoe,
  // which also covers multi-token-prediction blocks after the trunk).
  const moeLayers = askedMoe ?? (fit && fit.nCpuMoe > 0 ? (fit.cpuMoe ? 'all' : fit.nCpuMoe) : undefined);
  const expertPattern = moeLayers === undefined ? undefined : expertOverridePattern(moeLayers);
  try {
    const nm = await native.Model.load(full, {
      gpuLayers,
      vocabOnly: o.vocabOnly,
      useMmap: o.useMmap,
      useMlock: o.useMlock,
      checkTensors: o.checkTensors,
      mtp: o.mtp,
      ...(o.rpcServers ? { rpcServers: o.rpcServers } : {}),
      ...(tensorSplit ? { tensorSplit } : {}),
      ...(expertPattern ? { cpuTensors: [expertPattern] } : {}),
    }, abortFlag, onProgress ? (p) => { try { onProgress(p); } catch { /* a throwing progress callback must not break loading */ } } : undefined);
    if (o.signal?.aborted) {
      nm.dispose();
      throw abortError(o.signal, 'Model loading');
    }
    const model = wrapModel(nm, full, o.vocabOnly, newContext);
    model.defaultMarkers = o.toolCallMarkers;
    model.fit = fit;
    if (projector !== undefined) await attachProjector(model, nm, projector, o);
    if (o.mediaLimits) model.mediaLimits = Object.freeze({ ...DEFAULT_MEDIA_LIMITS, ...o.mediaLimits });
    return model;
  } catch (e) {
    if (e instanceof LlamuxError) throw e;
    const err = fromNative(e, stack);
    if (err.code === 'ABORTED') throw abortError(o.signal, 'Model loading');
    throw err;
  } finally {
    o.signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * The projector's file checked before anything loads: it exists, and its GGUF header says it is
 * a projector ("clip"). Whether it fits the text model, libmtmd says later (attachProjector).
 */
async function checkProjectorFile(path: string, vocabOnly: boolean): Promise<string> {
  if (vocabOnly) throw new LlamuxError('INVALID_ARGUMENT', 'A projector needs the model\'s weights: not with vocabOnly');
  let info;
  try {
    info = await stat(path);
  } catch (e) {
    throw new LlamuxError('MODEL_NOT_FOUND', `No projector file at "${path}"`, { cause: e });
  }
  if (!info.isFile()) throw new LlamuxError('MODEL_NOT_FOUND', `The projector "${path}" is not a regular file`);
  if (info.size === 0) throw new LlamuxError('MODEL_INVALID', `The projector "${path}" is empty (0 bytes)`);
  // Loaded lazily: the root export keeps the GGUF modules out of its static graph.
  const { readGgufFile, metadataValue } = await import('../gguf/reader.js');
  let file;
  try {
    file = await readGgufFile(path);
  } catch (e) {
    throw new LlamuxError('MODEL_INVALID', `Failed to load the projector "${path}": not a GGUF file (corrupt or truncated?)`, { cause: e });
  }
  const arch = metadataValue(file, 'general.architecture');
  if (arch !== 'clip') {
    throw new LlamuxError('MODEL_INVALID', `Failed to load the projector "${path}": a GGUF with architecture "${String(arch)}", not a multimodal projector ("clip"): is it the text model?`);
  }
  return path;
}

/** Loads the projector beside the text model (libmtmd); the model is disposed when it fails. */
async function attachProjector(model: Model, nm: NativeModel, path: string, o: { signal?: AbortSignal | undefined }): Promise<void> {
  try {
    const p = await native.loadProjector(nm, path);
    if (o.signal?.aborted) throw abortError(o.signal, 'Model loading');
    model.capabilities = Object.freeze({ vision: p.vision, audio: p.audio });
    model.projector = Object.freeze({ path, fingerprint: p.fingerprint, mrope: p.mrope, nonCausal: p.nonCausal, audioSampleRate: p.audioSampleRate });
  } catch (e) {
    await model.dispose();
    throw e;
  }
}

/**
 * The 'auto' plan for a model file on this machine's devices (undefined when its GGUF header
 * cannot be read: llama.cpp then loads it, or says why it cannot). `llamux doctor` prints it.
 */
export async function planForFile(
  path: string,
  request?: {
    contextSize?: number;
    sequences?: number;
    contextFloor?: number;
    marginMb?: number;
    /** Experts kept in RAM as the load asks (the plan then does not choose). */
    nCpuMoe?: number | 'all';
    /** Plan for these devices instead of the ones ggml reports. */
    devices?: readonly FitDevice[];
  },
): Promise<FitPlan | undefined> {
  let sizes;
  try {
    // Loaded lazily: the root export keeps the GGUF modules out of its static graph.
    const { readGgufFile } = await import('../gguf/reader.js');
    sizes = modelSizesFromGguf(await readGgufFile(path));
  } catch {
    return undefined;
  }
  if (sizes.layers === 0) return undefined;
  const { marginMb, devices, ...rest } = request ?? {};
  return Object.freeze(planFit(sizes, devices ?? native.systemInfo().devices, { ...rest, ...(marginMb !== undefined ? { marginBytes: marginMb * 1024 * 1024 } : {}) }));
}

/** Whether llama.cpp has a GPU (or integrated GPU) device to offload layers to. */
function hasGpu(): boolean {
  return native.systemInfo().devices.some((d) => d.type === 'gpu' || d.type === 'igpu');
}
