// Prometheus text exposition of the server's counters.
import type { CacheReport } from '../engine/events.js';

const TTFT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

type Labels = Record<string, string>;

function key(labels: Labels): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}="${labels[k]!.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`)
    .join(',');
}

class Counter {
  readonly values = new Map<string, number>();
  constructor(readonly name: string, readonly help: string) {}
  inc(labels: Labels = {}, by = 1): void {
    const k = key(labels);
    this.values.set(k, (this.values.get(k) ?? 0) + by);
  }
  render(type = 'counter'): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} ${type}`];
    if (this.values.size === 0 && type === 'counter') lines.push(`${this.name} 0`);
    for (const [k, v] of this.values) lines.push(k ? `${this.name}{${k}} ${v}` : `${this.name} ${v}`);
    return lines.join('\n');
  }
}

class Histogram {
  #counts = new Array<number>(TTFT_BUCKETS.length).fill(0);
  #sum = 0;
  #n = 0;
  constructor(readonly name: string, readonly help: string) {}
  observe(v: number): void {
    this.#sum += v;
    this.#n++;
    for (let i = 0; i < TTFT_BUCKETS.length; i++) if (v <= TTFT_BUCKETS[i]!) this.#counts[i]!++;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    TTFT_BUCKETS.forEach((b, i) => lines.push(`${this.name}_bucket{le="${b}"} ${this.#counts[i]}`));
    lines.push(`${this.name}_bucket{le="+Inf"} ${this.#n}`, `${this.name}_sum ${this.#sum}`, `${this.name}_count ${this.#n}`);
    return lines.join('\n');
  }
}

/** The engine's cache outcome of a request (see CacheReport in src/engine/events.ts). */
export type CacheOutcome = CacheReport['outcome'];

/** The counters of Context#cacheStats() the metrics show. */
export interface CacheStatsLike {
  sessions: number;
  pinnedSequences: number;
  ramBytes: number;
  ramEntries: number;
  diskBytes: number;
  spills: number;
  preemptions: number;
  restores: number;
  diskRestores: number;
  ramEvictions: number;
  specVerifications?: number;
  specDraftedTokens?: number;
  specAcceptedTokens?: number;
}

export class ServerMetrics {
  readonly requests = new Counter('llamux_requests_total', 'HTTP requests by endpoint and status code.');
  readonly promptTokens = new Counter('llamux_prompt_tokens_total', 'Prompt tokens of completed generations.');
  readonly completionTokens = new Counter('llamux_completion_tokens_total', 'Generated tokens.');
  readonly reusedTokens = new Counter('llamux_reused_tokens_total', 'Prompt tokens served from KV computed by earlier requests.');
  readonly prefilledTokens = new Counter('llamux_prefilled_tokens_total', 'Prompt tokens decoded.');
  readonly cacheOutcomes = new Counter('llamux_cache_outcomes_total', 'Generations by the engine\'s cache outcome (exact, sticky, partial, restored, cold) and the tier the KV came from (live, shared, ram, disk, none).');
  readonly replay = new Counter('llamux_tool_call_replay_total', 'Historical tool calls by replay outcome (replayed: exact tokens spliced; unknown: id not stored or arguments changed; unlocated: stored but not found in the rendered prompt; rerendered: found, but its turn renders differently before it than it was generated, so it is tokenized as text).');
  readonly turnReplay = new Counter('llamux_turn_replay_total', 'Historical assistant turns the server generated, by whole-turn replay outcome (replayed: the exact tokens of the whole turn spliced; changed: the client edited or stripped its reasoning, content or calls; unlocated: the template does not render it as its prompt, a body and a closing; dropped: the template renders it differently once a later user message follows (earlier reasoning dropped; see --keep-reasoning); invalid: the stored tokens failed validation).');
  readonly toolCalls = new Counter('llamux_tool_calls_total', 'Tool calls returned to clients.');
  readonly ttft = new Histogram('llamux_time_to_first_token_seconds', 'Time from submission to the first generated token.');
  inFlight = 0;
  /** Streams whose client is not reading (their generation pauses at its buffer). */
  streamsWaiting = 0;

  recordGeneration(r: {
    promptTokens: number;
    reusedTokens: number;
    prefilledTokens: number;
    generatedTokens: number;
    ttftMs: number;
    cacheOutcome: CacheOutcome;
    cacheTier?: string;
  }): void {
    this.promptTokens.inc({}, r.promptTokens);
    this.completionTokens.inc({}, r.generatedTokens);
    this.reusedTokens.inc({}, r.reusedTokens);
    this.prefilledTokens.inc({}, r.prefilledTokens);
    this.cacheOutcomes.inc({ outcome: r.cacheOutcome, tier: r.cacheTier ?? 'none' });
    if (r.ttftMs >= 0) this.ttft.observe(r.ttftMs / 1000);
  }

  /** The text exposition; `cache` adds the context's tier and session counters. */
  render(cache?: CacheStatsLike): string {
    const tiers: string[] = [];
    if (cache) {
      const line = (name: string, type: 'gauge' | 'counter', help: string, v: number): void => {
        tiers.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, `${name} ${v}`);
      };
      line('llamux_sessions', 'gauge', 'Live conversation sessions.', cache.sessions);
      line('llamux_pinned_sequences', 'gauge', 'Sequences pinned to a session.', cache.pinnedSequences);
      line('llamux_cache_ram_bytes', 'gauge', 'Bytes of saved sequence states in the RAM tier.', cache.ramBytes);
      line('llamux_cache_ram_entries', 'gauge', 'Saved sequence states in the RAM tier.', cache.ramEntries);
      line('llamux_cache_disk_bytes', 'gauge', 'Bytes of saved sequence states in the disk tier.', cache.diskBytes);
      line('llamux_cache_spills_total', 'counter', 'Idle sessions moved to the RAM tier.', cache.spills);
      line('llamux_preemptions_total', 'counter', 'Requests that gave their KV to a full cache and resumed later.', cache.preemptions);
      line('llamux_cache_restores_total', 'counter', 'States restored from the RAM tier.', cache.restores);
      line('llamux_cache_disk_restores_total', 'counter', 'States restored from the disk tier.', cache.diskRestores);
      line('llamux_cache_ram_evictions_total', 'counter', 'States evicted from the RAM tier.', cache.ramEvictions);
      line('llamux_speculative_verifications_total', 'counter', 'Speculative decoding: drafts verified.', cache.specVerifications ?? 0);
      line('llamux_speculative_drafted_tokens_total', 'counter', 'Speculative decoding: draft tokens verified.', cache.specDraftedTokens ?? 0);
      line('llamux_speculative_accepted_tokens_total', 'counter', 'Speculative decoding: draft tokens the output kept.', cache.specAcceptedTokens ?? 0);
    }
    return [
      this.requests.render(),
      this.promptTokens.render(),
      this.completionTokens.render(),
      this.reusedTokens.render(),
      this.prefilledTokens.render(),
      this.cacheOutcomes.render(),
      this.replay.render(),
      this.turnReplay.render(),
      this.toolCalls.render(),
      this.ttft.render(),
      '# HELP llamux_requests_in_flight Generations running or queued.',
      '# TYPE llamux_requests_in_flight gauge',
      `llamux_requests_in_flight ${this.inFlight}`,
      '# HELP llamux_streams_waiting_for_client Streamed responses paused because the client does not read.',
      '# TYPE llamux_streams_waiting_for_client gauge',
      `llamux_streams_waiting_for_client ${this.streamsWaiting}`,
      ...tiers,
      '',
    ].join('\n');
  }
}
