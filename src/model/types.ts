// What a loaded model reports about itself: its vocabulary, one token (and its attribute bits),
// its metadata. Plain data, shared by the Model class (src/model/model.ts) and the interface the
// engine uses of it (src/model/handle.ts).

/** llama_token_attr bits. */
export const TokenAttribute = {
  UNDEFINED: 0,
  UNKNOWN: 1 << 0,
  UNUSED: 1 << 1,
  NORMAL: 1 << 2,
  CONTROL: 1 << 3,
  USER_DEFINED: 1 << 4,
  BYTE: 1 << 5,
  NORMALIZED: 1 << 6,
  LSTRIP: 1 << 7,
  RSTRIP: 1 << 8,
  SINGLE_WORD: 1 << 9,
} as const;

export interface VocabInfo {
  size: number;
  /** llama_vocab_type: 1 SPM, 2 BPE, 3 WPM, 4 UGM, 5 RWKV, 6 PLAMO2. */
  type: number;
  bos: number;
  eos: number;
  /** -1 when the model has none. */
  eot: number;
  sep: number;
  nl: number;
  pad: number;
  addBos: boolean;
  addEos: boolean;
  /** The tokenizer adds a separator (BERT: [SEP]). */
  addSep: boolean;
  /** Every token that ends generation. */
  eogTokens: readonly number[];
  /** Fill-in-the-middle tokens (-1: the vocabulary has none), as llama.cpp found them: `<|fim_prefix|>` ... (Qwen2.5-Coder), `<fim_prefix>` (StarCoder), `<PRE>` (CodeLlama) and the other families'. */
  fim: FimTokens;
}

export interface FimTokens {
  prefix: number;
  suffix: number;
  middle: number;
  pad: number;
  /** Repository name marker (repo-level FIM: Qwen2.5-Coder's `<|repo_name|>`). */
  repo: number;
  /** File separator (repo-level FIM: `<|file_sep|>`). */
  sep: number;
}

export interface TokenInfo {
  /** The token's text as stored in the vocabulary (e.g. "▁Hello", "<0x0A>"). */
  text: string;
  score: number;
  /** Bit set of {@link TokenAttribute}. */
  attributes: number;
  isEog: boolean;
  isControl: boolean;
}

/** Where llama.cpp placed a model's weights (Model.placement()). */
export interface WeightPlacement {
  /** Weight bytes per place: "CPU" (system RAM) or a device name (CUDA0, Vulkan0, RPC0[host:port] ...). */
  devices: Readonly<Record<string, number>>;
  tensors: ReadonlyArray<{
    name: string;
    bytes: number;
    /** "CPU" or a device name, as in `devices`. */
    device: string;
    /** ggml's buffer type: CPU, CPU_Mapped (memory-mapped file), CPU_REPACK, CUDA0, Vulkan0 ... */
    bufferType: string;
  }>;
}

export interface ModelMetadata {
  /** general.architecture, e.g. "llama". */
  architecture: string;
  name?: string;
  description: string;
  trainingContextSize: number;
  embeddingSize: number;
  layers: number;
  heads: number;
  kvHeads: number;
  slidingWindow: number;
  parameters: number;
  sizeBytes: number;
  isRecurrent: boolean;
  isHybrid: boolean;
  hasEncoder: boolean;
  /** Multi-token-prediction (NextN) blocks after the trunk (GLM-4.5+, DeepSeek-V3, Qwen3.5 ...). */
  mtpLayers: number;
  /** Whether they were loaded (`loadModel(path, { mtp: true })`): speculative mode 'mtp' needs them. */
  mtpLoaded: boolean;
  /** tokenizer.chat_template, or null. */
  chatTemplate: string | null;
  /** Identifies these weights; part of every cache key. */
  fingerprint: string;
  /** Every GGUF key, values as llama.cpp prints them (arrays are summarised). */
  gguf: Readonly<Record<string, string>>;
}

/** What a model's projector reads (`model.capabilities`). */
export interface ModelCapabilities {
  readonly vision: boolean;
  readonly audio: boolean;
}

/** Bounds on the media of one prompt (loadModel `mediaLimits`). */
export interface MediaLimits {
  /** Largest image, in pixels (width × height), checked from the file's header before decoding. */
  readonly maxPixels: number;
  /** Most media parts in one prompt. */
  readonly maxPerPrompt: number;
  /** Largest encoded media part, in bytes. */
  readonly maxBytes: number;
  /** Longest audio part, in seconds: checked from a WAV or FLAC header before decoding, and on
   * the decoded samples for every format (MP3 headers do not say). */
  readonly maxAudioSeconds: number;
}

