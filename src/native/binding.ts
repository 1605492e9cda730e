// The only file that loads the native addon. It types exactly what the addon exports.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { backendFilesValue, findGpuPackages, type GpuPackage, locateAddon, platformPackageName, probeGpuPackage } from './locate.js';
import { LlamuxError } from '../errors.js';
import type { NativeStats, NativeCacheStats, NativeReady, NativeLogprob, NativeEvent } from './types.js';
import type { NativeContextOptions, NativeEmbedJob, NativeRequest, NativeSessionCommand } from './request-schema.js';
import type { NativeMediaPrompt, NativeModel, NativeProjectorInfo } from './native-model.js';
export type { NativeStats, NativeCacheStats, NativeReady, NativeLogprob, NativeEvent } from './types.js';
export type { NativeContextOptions, NativeEmbedJob, NativeRequest, NativeSessionCommand } from './request-schema.js';
export type { NativeMediaList, NativeMediaPrompt, NativeMetadata, NativeModel, NativeProjectorInfo, NativeRpcState, NativeTokenInfo, NativeVocabInfo } from './native-model.js';

export interface NativeLoadOptions {
  gpuLayers?: number;
  vocabOnly?: boolean;
  useMmap?: boolean;
  mtp?: boolean;
  useMlock?: boolean;
  checkTensors?: boolean;
  /** host:port of each RPC server; layers go to their devices. */
  rpcServers?: string[];
  tensorSplit?: number[];
  /** Patterns (std::regex, searched in the name) of weights kept in a CPU buffer (src/model/moe.ts). */
  cpuTensors?: string[];
}

/** startRpcServer(): what the RPC server exposes. */
export interface NativeRpcServerInfo {
  endpoint: string;
  devices: Array<{ name: string; description: string; memoryFree: number; memoryTotal: number }>;
}

export interface NativeContext {
  submit(params: NativeRequest): void;
  sessionCommand(command: NativeSessionCommand): void;
  /** A new session's handle (never reused by this context); the engine makes its state on first use. */
  openSession(): number;
  embed(job: NativeEmbedJob): void;
  cancel(id: number): void;
  pause(id: number, paused: boolean): void;
  setRef(ref: boolean): void;
  close(): Promise<void>;
  stats(): NativeCacheStats;
}

export interface NativeReuseInputs {
  enabled?: boolean;
  canTruncate?: boolean;
  checkpoints?: boolean;
  unifiedKv?: boolean;
  pinned?: boolean;
  minGain?: number;
  promptTokens: number;
  liveTokens?: number;
  liveCommon?: number;
  sessionTokens?: number;
  sessionCommon?: number;
  sequenceCommon?: number[];
  target?: number;
  ramCommon?: number;
  diskCommon?: number;
  diskReadyCommon?: number;
  /** Prompt tokens kept after trimming (default: the plan's common), for the outcome. */
  kept?: number;
}

export interface NativeReusePlan {
  source: 'none' | 'live' | 'session' | 'shared' | 'ram' | 'disk';
  common: number;
  shareFrom: number;
  readDisk: boolean;
  outcome: NativeStats['cacheOutcome'];
  tier: NativeStats['cacheTier'];
}

export interface FlashAttentionShape {
  queries: number;
  kv: number;
  heads?: number;
  kvHeads?: number;
  headDim?: number;
  valueDim?: number;
  mask?: 'none' | 'causal' | 'sequences' | 'alibi' | 'holes' | 'tail' | 'sparse';
  softcap?: number;
  kvF32?: boolean;
  threads?: number;
  seed?: number;
}

export interface NativeBinding {
  Model: {
    load(path: string, options: NativeLoadOptions, abortFlag: Int32Array, onProgress?: (p: number) => void): Promise<NativeModel>;
  };
  Context: new (model: NativeModel, options: NativeContextOptions, onEvents: (events: NativeEvent[]) => void) => NativeContext;
  /** Test hooks over plain C++ pieces of the engine. */
  testing: {
    markerMatcher(
      markers: { start: Int32Array; end: Int32Array; payloadStart?: Int32Array; payloadEnd?: Int32Array },
      tokens: Int32Array,
    ): { outputs: Array<[ 'text' | 'body' | 'open' | 'close' | 'payloadOpen' | 'payloadClose', Int32Array ]>; greedy: boolean[]; region: number };
    textStream(stops: string[], pieces: Uint8Array[]): { text: Uint8Array; deltas: Uint8Array[]; stopped: boolean; stopAt: number };
    /** native/kv/reuse_planner.h: an omitted *Common key means that source has no entry. */
    planReuse(inputs: NativeReuseInputs): NativeReusePlan;
    /** Feeds tokens to a llama.cpp grammar: how many it accepts, and whether it may end there. */
    /** One request's draft length per tick (0: none) when the first agree[t] draft tokens of tick t would stand (native/speculative/speculative.h). */
    speculativePolicy(draftMax: number, contextAccepted: number, contextMisses: number, agree: number[], draftModel?: boolean): { lengths: number[]; accepted: number; misses: number };
    grammarAccepts(model: NativeModel, gbnf: string, root: string, tokens: Int32Array): { parsed: boolean; accepted: number; complete: boolean };
    /** Issue 26, tests only: while on, the scheduler copies the logits it samples from, keyed by the
     * request's seed and step (native/testing/logits_tap.h); logitsTap clears them, takeLogits hands them over. */
    logitsTap(on: boolean): void;
    takeLogits(): Array<{ seed: number; step: number; logits: Float32Array }>;
    /** One plain llama_tokenize call (the reference for the bounded tokenizer). */
    tokenizeRaw(model: NativeModel, text: string, addSpecial: boolean, parseSpecial: boolean): Int32Array;
    /** The bounded tokenizer with a chosen piece size. */
    tokenizeBounded(model: NativeModel, text: string, addSpecial: boolean, parseSpecial: boolean, pieceBytes: number): Int32Array;
    /** ggml's CPU flash attention on random data: its largest absolute error against exact
     * attention, as dispatched (`kernel`) and with ggml's reference kernel (`reference`). */
    flashAttentionCheck(shape: FlashAttentionShape): { kernel: number; reference: number; magnitude: number };
  };
  shutdownAll(): void;
  /** libmtmd (native/media): the model's projector, loaded on a libuv thread (MODEL_INVALID when the file is none for this model). */
  loadProjector(model: NativeModel, path: string): Promise<NativeProjectorInfo>;
  projectorInfo(model: NativeModel): NativeProjectorInfo | null;
  /** A prompt's parts (text, and encoded media: PNG, JPEG, ... WAV, MP3) to tokens on a libuv
   * thread; bad media rejects with INVALID_ARGUMENT and `part` (its index). */
  tokenizeMedia(model: NativeModel, parts: Array<string | Uint8Array>, addSpecial: boolean, parseSpecial: boolean, maxPixels: number, maxAudioSeconds: number): Promise<NativeMediaPrompt>;
  /** Whether the projector still holds every media run of these tokens (each touched as used). */
  mediaHeld(model: NativeModel, tokens: Int32Array): boolean;
  /** libmtmd's default media marker. */
  mediaMarker: string;
  /** Tests only: the embeddings (tokens x embedding width) the projector computes for one encoded medium. */
  mediaEmbeddings(model: NativeModel, media: Uint8Array): Promise<Float32Array>;
  /** Raises the calling thread's nice value (Linux); false where it cannot. */
  lowerThreadPriority(delta: number): boolean;
  /** Serves this process's devices to RPC clients (ggml-rpc) from a native thread. */
  startRpcServer(options: { host: string; port: number; threads?: number; cacheDir?: string }, onExit: () => void): NativeRpcServerInfo;
  setLogger(handler: ((batch: Array<number | string>) => void) | undefined, level: number): void;
  systemInfo(): {
    llamaSystemInfo: string;
    supportsGpuOffload: boolean;
    supportsMmap: boolean;
    maxParallelSequences: number;
    maxDevices: number;
    /** 'variants': CPU backend chosen at run time among several builds; 'native': one static build for the build machine. */
    buildKind: 'variants' | 'native';
    /** The CPU backend variant in use (e.g. 'haswell', 'zen4'), or 'native'. */
    cpuVariant: string;
    backendDirectory: string;
    /** Why no CPU backend could be loaded ('' when one was). */
    backendError: string;
    loadedBackends: string[];
    /** Every CPU variant found, with this CPU's score for it ('zen4:43'; 0 = cannot run here). */
    cpuVariants: string[];
    devices: Array<{ name: string; description: string; type: 'cpu' | 'gpu' | 'igpu' | 'accel'; memoryFree: number; memoryTotal: number }>;
  };
}

/** The package root: two levels above src/native/ (tests) or dist/native/ (the built package). Inside an
 * Electron asar archive, native files can only be loaded from the unpacked copy
 * (`asarUnpack`), so look there. */
export const packageRoot = unpackedPath(join(dirname(fileURLToPath(import.meta.url)), '..', '..'));

function unpackedPath(dir: string): string {
  return process.versions.electron ? dir.replace(/\.asar([\\/]|$)/, '.asar.unpacked$1') : dir;
}

function loadFailure(tried: string, err: unknown): LlamuxError {
  const cause = (err as Error)?.message ?? String(err);
  return new LlamuxError(
    'NATIVE_LOAD_FAILED',
    `llamux could not load its native addon for ${process.platform}-${process.arch} (Node ${process.version}).\n` +
      `Tried: ${tried}\n` +
      `Cause: ${cause}\n` +
      'Possible solutions:\n' +
      `- install the prebuilt addon for this platform: npm install ${platformPackageName()} (npm installs it with llamux unless optional dependencies are omitted)\n` +
      '- reinstall so the install step can use a prebuilt binary or build one: npm rebuild llamux\n' +
      '- build from source (needs cmake 3.18+ and a C++17 compiler): LLAMUX_BUILD_FROM_SOURCE=1 npm rebuild llamux\n' +
      '- in an Electron app, unpack the native files from the asar archive (asarUnpack: ["**/node_modules/llamux/{build,prebuilds}/**", "**/node_modules/@llamux/**"])\n' +
      '- see docs/troubleshooting.md',
    { cause: err },
  );
}

/** The GPU backend packages found at load time and whether their check passed. */
export const gpuPackages: GpuPackage[] = [];

function load(): NativeBinding {
  const require = createRequire(import.meta.url);
  const choice = locateAddon(packageRoot);
  if (!choice.file) {
    throw loadFailure(choice.tried.join('; '), new Error(`no native addon found; the usual one comes from the package ${platformPackageName()}`));
  }
  const file = choice.file;
  // GPU packages: checked in a child process first, then named to the addon through
  // LLAMUX_BACKEND_FILES (read once, when the backends load in systemInfo() below).
  const userFiles = process.env.LLAMUX_BACKEND_FILES;
  if (userFiles === undefined && process.env.LLAMUX_GPU_PACKAGES !== 'off') {
    for (const pkg of findGpuPackages(packageRoot)) {
      const checked = probeGpuPackage(file, pkg);
      gpuPackages.push(checked);
      if (!checked.ok) {
        process.emitWarning(`llamux: the GPU backend package ${checked.name} is not used (${checked.reason}); running on the CPU. LLAMUX_GPU_PACKAGES=off skips the check.`, { code: 'LLAMUX_GPU_BACKEND_UNAVAILABLE' });
      }
    }
    const files = backendFilesValue(gpuPackages);
    if (files) process.env.LLAMUX_BACKEND_FILES = files;
  }
  let binding: NativeBinding;
  try {
    binding = require(file) as NativeBinding;
    // A binary that loads but finds no CPU backend it can run (missing or foreign files).
    const info = binding.systemInfo();
    if (info.backendError) throw new Error(info.backendError);
  } catch (err) {
    throw loadFailure(`${file} (${choice.source})`, err);
  } finally {
    // Child processes (rpc-server, workers) run their own check.
    if (userFiles === undefined) delete process.env.LLAMUX_BACKEND_FILES;
  }
  return binding;
}

export const native: NativeBinding = load();

// process.exit() skips environment cleanup hooks: stop engine threads before C++ static
// destructors run underneath a decode.
process.once('exit', () => native.shutdownAll());
