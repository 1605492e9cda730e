// The addon's Model object (native/model/model.{h,cc}) as TypeScript sees it, and what its
// methods return. src/native/binding.ts re-exports these with the rest of the addon's types.

/** Model.rpcState(): the RPC servers of a model and whether one has died. */
export interface NativeRpcState {
  servers: string[];
  dead: boolean;
  message: string;
}

export interface NativeTokenInfo {
  text: string;
  score: number;
  attributes: number;
  isEog: boolean;
  isControl: boolean;
}

export interface NativeVocabInfo {
  size: number;
  type: number;
  bos: number;
  eos: number;
  eot: number;
  sep: number;
  nl: number;
  pad: number;
  addBos: boolean;
  addEos: boolean;
  /** The tokenizer adds a separator (BERT: [SEP]). */
  addSep: boolean;
  eogTokens: Int32Array;
  fim: { prefix: number; suffix: number; middle: number; pad: number; repo: number; sep: number };
}

export interface NativeMetadata {
  gguf: Record<string, string>;
  description: string;
  nCtxTrain: number;
  nEmbd: number;
  nLayer: number;
  nHead: number;
  nHeadKv: number;
  nSwa: number;
  nParams: number;
  sizeBytes: number;
  isRecurrent: boolean;
  isHybrid: boolean;
  hasEncoder: boolean;
  mtpLayers: number;
  mtpLoaded: boolean;
  chatTemplate: string | null;
  fingerprint: string;
}

export interface NativeModel {
  /** Bounded pieces (native/model/tokenizer.h); `cancel[0] !== 0` stops it (ABORTED); more than `maxTokens` throws CONTEXT_OVERFLOW. */
  tokenize(text: string, addSpecial: boolean, parseSpecial: boolean, cancel?: Int32Array, maxTokens?: number): Int32Array;
  /** The same on a libuv thread. */
  tokenizeAsync(text: string, addSpecial: boolean, parseSpecial: boolean, cancel?: Int32Array, maxTokens?: number): Promise<Int32Array>;
  detokenize(tokens: Int32Array, special: boolean): string;
  tokenPiece(token: number, special: boolean): Uint8Array;
  tokenInfo(token: number): NativeTokenInfo;
  vocabInfo(): NativeVocabInfo;
  metadata(): NativeMetadata;
  /** null for a local model. */
  rpcState(): NativeRpcState | null;
  /** A LoRA adapter loaded on a worker thread (native/model/adapter_js.cc); freed with the model. */
  loadAdapter(path: string): Promise<{ id: number; path: string; fingerprint: string; metadata: Record<string, string> }>;
  /** Where each weight tensor was placed ("CPU" for host buffers). */
  placement(): { tensors: Array<{ name: string; bytes: number; bufferType: string; device: string }> };
  dispose(): void;
}

/** The media of one tokenized prompt (native/media/media_js.cc): opaque, handed to submit. */
export interface NativeMediaList {
  readonly __nativeMediaList: unique symbol;
}

/** What a projector reads and how its media are placed (native/media/projector.h, ProjectorInfo). */
export interface NativeProjectorInfo {
  vision: boolean;
  audio: boolean;
  /** -1 without audio. */
  audioSampleRate: number;
  mrope: boolean;
  nonCausal: boolean;
  marker: string;
  fingerprint: string;
}

/** tokenizeMedia(): the prompt's tokens (media as runs of media ids), its media, and where each run starts and how long it is. */
export interface NativeMediaPrompt {
  tokens: Int32Array;
  media: NativeMediaList;
  /** start, length, start, length, ... in prompt order */
  runs: number[];
}
