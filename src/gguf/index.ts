/** GGUF writing and reading, and the generated test and benchmark models. */
export {
  GGML_BLOCK,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_VERSION,
  GgmlType,
  GgufType,
  LlamaFileType,
  TokenType,
} from './constants.js';
export type { GgmlTypeName, GgufScalarType, TokenTypeName } from './constants.js';
export { GgufFormatError } from './errors.js';
export { f16FromNumber, f16ToNumber, encodeF16 } from './f16.js';
export { encodeQ8_0, decodeQ8_0, Q8_0_BLOCK_BYTES, Q8_0_BLOCK_ELEMENTS, encodeQ4_0, decodeQ4_0, Q4_0_BLOCK_BYTES, Q4_0_BLOCK_ELEMENTS } from './quant.js';
export { Prng, hashSeed } from './prng.js';
export { val } from './types.js';
export type {
  GgufArrayValue,
  GgufBigIntType,
  GgufMetadata,
  GgufNumberType,
  GgufSpec,
  GgufTensorSpec,
  GgufValue,
  TensorData,
  TensorFill,
} from './types.js';
export { encodeGguf, planGguf, tensorByteSize, writeGgufFile } from './writer.js';
export type { GgufLayout, GgufWrittenTensor, WriteGgufFileOptions } from './writer.js';
export { metadataValue, parseGguf, readGgufFile, readTensorBytes } from './reader.js';
export type { GgufFile, GgufTensorInfo, ParseGgufOptions, ReadGgufFileOptions } from './reader.js';
export { buildSpmVocab, sp, SpmVocab, SPACE, spmVocabFromMetadata, words } from './vocab.js';
export type { SpecialTokenSpec, SpmVocabOptions, TokenizeOptions, VocabEntry } from './vocab.js';
export { buildScriptedModel, writeBytesAtomic, writeScriptedModel } from './scripted.js';
export { buildLoraAdapter } from './lora.js';
export type { LoraAdapterSpec, LoraTensorSpec } from './lora.js';
export type {
  BuiltScriptedModel,
  FlagRule,
  ScriptBranch,
  ScriptDescription,
  ScriptedLogits,
  ScriptedModelDescription,
  ScriptedModelSpec,
  ScriptOutcome,
  ScriptSpec,
  ScriptStep,
  TieStep,
} from './scripted.js';
export { CHATML_TOOLS_TEMPLATE } from './chat-template.js';
export { buildTestModel, ensureTestModels, TEST_MODEL_NAMES, testModelSpec } from './fixtures.js';
export type { TestModel, TestModelName } from './fixtures.js';
export {
  llamaParameterCount,
  randomModelSpec,
  RANDOM_MODEL_PRESETS,
  syntheticVocab,
  writeRandomModel,
} from './random.js';
export type { LlamaShape, RandomModelInfo, RandomModelOptions, RandomModelPreset } from './random.js';
export {
  buildFamilySpec,
  buildZooSpec,
  CODE_BITS,
  glm4moeFamilyWith,
  ensureZooModels,
  writeZooModel,
  ZOO_ARCHITECTURES,
  ZOO_GENERATOR_VERSION,
  zooFamily,
  zooGreedyChain,
  zooSuccessor,
} from './zoo/index.js';
export type {
  BuiltZooModel,
  EnsureZooModelsOptions,
  Glm4moeDims,
  ZooArchitecture,
  ZooFamily,
  ZooModelDescription,
  ZooModelOptions,
  ZooScales,
  ZooSuccessors,
  ZooVocabSource,
} from './zoo/index.js';
export { BERT_DIMS, buildEmbeddingSpec, EMBEDDING_MODEL_NAMES, ensureEmbeddingModels, POOLING_TYPE } from './zoo/embedding.js';
export type { EmbeddingModelDescription, EmbeddingModelName, PoolingName } from './zoo/embedding.js';
export { buildProjectorSpec } from './projector.js';
export { buildAudioProjectorSpec } from './audio-projector.js';
export type { AudioProjectorDescription, AudioProjectorOptions } from './audio-projector.js';
export { buildQwen3vlProjectorSpec } from './projector-qwen3vl.js';
export type { Qwen3vlProjectorDescription, Qwen3vlProjectorOptions } from './projector-qwen3vl.js';
export type { ProjectorDescription, ProjectorOptions } from './projector.js';
