// What the server builds around one model and its context: the chat template, the prompt
// workers, the tool-call store and the ChatService. One per model: the single-model server has
// one, the router (src/server/router.ts) one per loaded model, so no store or cache is shared.
import { markerTexts } from '../chat/prompt.js';
import { ChatTemplate } from '../chat/template.js';
import type { Context } from '../engine/context.js';
import type { MarkerOption } from '../engine/markers.js';
import type { Model } from '../model/model.js';
import type { ContextOptions, SpeculativeOptions } from '../options.js';
import type { ServerMetrics } from './metrics.js';
import { PromptPool } from './prompt-pool.js';
import { ChatService, type ServerLog } from './service.js';
import { configurePromptCache, DEFAULT_TTLS } from './cache-breakpoints.js';
import type { z } from 'zod';
import { ServerAdapters, type ServerLoraSchema } from './lora.js';
import { ToolCallStore, type ToolCallStoreLimits } from './store.js';

/** The server options a model's context and service are made from. */
export interface ModelServiceSettings {
  parallel: number;
  markers: MarkerOption;
  maxQueued?: number;
  sessionTtlMs?: number;
  threads?: number;
  batchSize?: number;
  cacheRamMb?: number;
  cacheDir?: string;
  deterministic?: boolean;
  storePath?: string;
  storeLimits?: ToolCallStoreLimits;
  chatTemplate?: string;
  tokenizeWorkers: number;
  tokenizeTimeoutMs: number;
  maxPromptBytes: number;
  isolateTenants: boolean;
  overflow: 'error' | 'truncate-middle';
  contextShift: boolean;
  keepReasoning: boolean;
  /** How long a `cache_control` breakpoint's prefix is retained, per ttl (cache-breakpoints.ts). */
  promptCacheTtlMs?: { '5m'?: number; '1h'?: number };
  /** LoRA adapters of the model (--lora): paths, or { path, scale }. */
  lora?: Array<z.output<typeof ServerLoraSchema>>;
}

/** A model's chat service and the parts it owns. */
export interface ModelService {
  readonly service: ChatService;
  readonly store: ToolCallStore;
  readonly prompts: PromptPool;
  /** Its LoRA adapters and their default scales (GET/POST /lora-adapters). */
  readonly adapters: ServerAdapters;
  /** Stops the prompt workers and closes the store (the context and model are the caller's). */
  close(): Promise<void>;
}

/** The context options of the server's settings (contextSize aside). */
export function serviceContextOptions(s: ModelServiceSettings, speculative?: SpeculativeOptions): ContextOptions {
  return {
    sequences: s.parallel,
    toolCallMarkers: s.markers,
    ...(s.maxQueued !== undefined ? { maxQueued: s.maxQueued } : {}),
    ...(s.sessionTtlMs !== undefined ? { sessionTtlMs: s.sessionTtlMs } : {}),
    ...(s.threads !== undefined ? { threads: s.threads, batchThreads: s.threads } : {}),
    ...(s.batchSize !== undefined ? { batchSize: s.batchSize, microBatchSize: s.batchSize } : {}),
    ...(s.cacheRamMb !== undefined ? { cacheRamMb: s.cacheRamMb } : {}),
    ...(s.cacheDir !== undefined ? { cacheDir: s.cacheDir } : {}),
    ...(s.deterministic ? { deterministic: true } : {}),
    ...(speculative ? { speculative } : {}),
  };
}

/** Builds the template, prompt workers, store and ChatService of a model and its context. */
export async function createModelService(
  model: Model,
  context: Context,
  s: ModelServiceSettings,
  shared: { metrics: ServerMetrics; log: ServerLog },
): Promise<ModelService> {
  const store = new ToolCallStore(s.storePath ?? ':memory:', s.storeLimits ?? {});
  let prompts: PromptPool | undefined;
  try {
    const template = ChatTemplate.fromModel(model, s.chatTemplate);
    const markerText = markerTexts(context);
    prompts = new PromptPool({
      modelPath: model.path,
      templateSource: template.source,
      bosToken: template.bosToken,
      eosToken: template.eosToken,
      ...(markerText ? { markers: markerText } : {}),
      size: s.tokenizeWorkers,
      timeoutMs: s.tokenizeTimeoutMs,
      // A prompt must be shorter than a sequence: tokenizing stops once it cannot be (unless
      // it is to be cut in the middle: --max-prompt-bytes bounds it then).
      ...(s.overflow === 'error' ? { maxTokens: context.settings.sequenceContextSize - 1 } : {}),
    });
    await prompts.start();
    const adapters = await ServerAdapters.load(model, s.lora ?? []);
    const service = new ChatService({
      model,
      context,
      template,
      store,
      metrics: shared.metrics,
      prompts,
      maxPromptBytes: s.maxPromptBytes,
      isolateTenants: s.isolateTenants,
      overflow: s.overflow,
      contextShift: s.contextShift,
      keepReasoning: s.keepReasoning,
      log: shared.log,
      adapters,
    });
    configurePromptCache(service, { ttlMs: { ...DEFAULT_TTLS, ...s.promptCacheTtlMs }, log: shared.log, isolateTenants: s.isolateTenants });
    const p = prompts;
    return {
      service,
      store,
      prompts: p,
      adapters,
      async close() {
        await p.close();
        store.close();
      },
    };
  } catch (e) {
    await prompts?.close();
    store.close();
    throw e;
  }
}
