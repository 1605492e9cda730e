/** What one architecture family of the zoo declares. */
import type { GgmlTypeName } from '../constants.js';
import type { ZooBuilder, ZooScales, ZooVocabSource } from './builder.js';

/** The architectures of the zoo (`general.architecture` values). */
export type ZooArchitecture =
  | 'llama'
  | 'qwen3'
  | 'qwen35'
  | 'qwen35moe'
  | 'gemma4'
  | 'gpt-oss'
  | 'granitehybrid'
  | 'lfm2'
  | 'glm4moe';

export interface ZooFamily {
  readonly arch: ZooArchitecture;
  readonly nEmbd: number;
  readonly nLayer: number;
  readonly contextLength: number;
  readonly vocab: ZooVocabSource;
  /** File in llama.cpp's `models/templates`. */
  readonly template: string;
  /** Where the vocabulary or template is a stand-in for the family's real one, why. */
  readonly note?: string;
  /** Types of the token embedding and the output head (the large tensors). */
  readonly embdType: GgmlTypeName;
  readonly outputType: GgmlTypeName;
  /** Name of the final norm (lfm2 stores it as `token_embd_norm.weight`). */
  readonly outputNorm?: string;
  /** Family defaults for the successor construction's scales (options override them). */
  readonly scales?: Partial<ZooScales>;
  /**
   * Multi-token-prediction blocks after the trunk (`block_count` counts them, `nLayer` does not),
   * and the tensor name of the MTP block's own token embedding, written only for a model built
   * with `mtpAgreement` below 1 (the head then mispredicts on purpose: index.ts).
   */
  readonly mtp?: { readonly layers: number; readonly embedding: string };
  /** Adds the architecture's hyper-parameters and block tensors. */
  build(b: ZooBuilder): void;
  /** A short description of the dims, for reports. */
  readonly dims: string;
}
