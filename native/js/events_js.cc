#include "js/events_js.h"

namespace llamux {

namespace {

Napi::Object StatsToJs(Napi::Env env, const FinalStats &s) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("promptTokens", s.promptTokens);
  o.Set("reusedTokens", s.reusedTokens);
  o.Set("prefilledTokens", s.prefilledTokens);
  o.Set("generatedTokens", s.generatedTokens);
  o.Set("queuedMs", s.queuedMs);
  o.Set("ttftMs", s.ttftMs);
  o.Set("prefillMs", s.prefillMs);
  o.Set("decodeMs", s.decodeMs);
  o.Set("prefillTokensPerSec", s.prefillTokensPerSec);
  o.Set("decodeTokensPerSec", s.decodeTokensPerSec);
  o.Set("sampleMs", s.sampleMs);
  o.Set("cacheOutcome", s.cacheOutcome);
  o.Set("cacheTier", s.cacheTier);
  o.Set("restoreMs", s.restoreMs);
  if (s.checkpoint >= 0) o.Set("checkpoint", s.checkpoint);
  o.Set("draftedTokens", s.draftedTokens);
  o.Set("acceptedTokens", s.acceptedTokens);
  o.Set("shiftedTokens", s.shiftedTokens);
  o.Set("retainedTokens", s.retainedTokens);
  o.Set("retainRefused", s.retainRefused);
  return o;
}

Napi::Object ReadyToJs(Napi::Env env, const ReadyInfo &r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("contextSize", r.contextSize);
  o.Set("sequenceContextSize", r.sequenceContextSize);
  o.Set("batchSize", r.batchSize);
  o.Set("microBatchSize", r.microBatchSize);
  o.Set("sequences", r.sequences);
  o.Set("threads", r.threads);
  o.Set("batchThreads", r.batchThreads);
  o.Set("unifiedKv", r.unifiedKv);
  o.Set("flashAttention", r.flashAttention);
  o.Set("kvTypeK", r.kvTypeK);
  o.Set("kvTypeV", r.kvTypeV);
  o.Set("canTruncateKv", r.canTruncateKv);
  o.Set("speculative", r.speculative);
  if (!r.speculativeOff.empty()) o.Set("speculativeOff", r.speculativeOff);
  o.Set("layoutKey", r.layoutKey);
  return o;
}

Napi::Array LogprobsToJs(Napi::Env env, const std::vector<TokenLogprob> &lps) {
  Napi::Array arr = Napi::Array::New(env, lps.size());
  uint32_t i = 0;
  for (const TokenLogprob &lp : lps) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("token", lp.token);
    o.Set("logprob", lp.logprob);
    Napi::Array top = Napi::Array::New(env, lp.top.size());
    uint32_t j = 0;
    for (const auto &t : lp.top) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("token", t.first);
      e.Set("logprob", t.second);
      top.Set(j++, e);
    }
    o.Set("top", top);
    arr.Set(i++, o);
  }
  return arr;
}

const char *EventTypeName(EventType t) {
  switch (t) {
    case EventType::Ready: return "ready";
    case EventType::Text: return "text";
    case EventType::Final: return "final";
    case EventType::CreateFailed: return "createFailed";
    case EventType::Closed: return "closed";
    case EventType::ToolCallStart: return "toolCallStart";
    case EventType::ToolCallDelta: return "toolCallDelta";
    case EventType::ToolCallEnd: return "toolCallEnd";
    case EventType::SessionDone: return "sessionDone";
    case EventType::RpcFailed: return "rpcFailed";
    case EventType::Reasoning: return "reasoning";
    case EventType::Embedded: return "embedded";
    case EventType::Progress: return "progress";
  }
  return "unknown";
}
}  // namespace

Napi::Array EventsToJs(Napi::Env env, const std::vector<Event> &batch) {
  Napi::Array arr = Napi::Array::New(env, batch.size());
  uint32_t i = 0;
  for (auto &e : batch) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("type", EventTypeName(e.type));
    o.Set("id", static_cast<double>(e.id));
    switch (e.type) {
      case EventType::Reasoning:
      case EventType::Text: {
        o.Set("text", Napi::String::New(env, e.text));
        if (!e.tokens.empty()) {
          Napi::Int32Array t = Napi::Int32Array::New(env, e.tokens.size());
          std::copy(e.tokens.begin(), e.tokens.end(), t.Data());
          o.Set("tokens", t);
        }
        if (!e.logprobs.empty()) o.Set("logprobs", LogprobsToJs(env, e.logprobs));
        break;
      }
      case EventType::Final:
        if (!e.logprobs.empty()) o.Set("logprobs", LogprobsToJs(env, e.logprobs));
        o.Set("finishReason", FinishReasonName(e.finishReason));
        if (!e.code.empty()) {
          o.Set("code", e.code);
          o.Set("message", e.message);
        }
        if (!e.stop.empty()) o.Set("stop", e.stop);
        o.Set("stats", StatsToJs(env, e.stats));
        break;
      case EventType::Ready:
        o.Set("ready", ReadyToJs(env, e.ready));
        break;
      case EventType::CreateFailed:
      case EventType::RpcFailed:
        o.Set("code", e.code);
        o.Set("message", e.message);
        break;
      case EventType::Closed:
        break;
      case EventType::SessionDone:
        if (!e.code.empty()) {
          o.Set("code", e.code);
          o.Set("message", e.message);
        }
        break;
      case EventType::ToolCallStart:
        o.Set("index", e.index);
        break;
      case EventType::Progress:
        o.Set("total", e.stats.promptTokens);
        o.Set("cached", e.stats.reusedTokens);
        o.Set("processed", e.stats.reusedTokens + e.stats.prefilledTokens);
        o.Set("ms", e.stats.prefillMs);
        o.Set("retainedTokens", e.stats.retainedTokens);
        o.Set("retainRefused", e.stats.retainRefused);
        break;
      case EventType::Embedded: {
        if (!e.code.empty()) {
          o.Set("code", e.code);
          o.Set("message", e.message);
          break;
        }
        Napi::Float32Array v = Napi::Float32Array::New(env, e.floats.size());
        std::copy(e.floats.begin(), e.floats.end(), v.Data());
        o.Set("data", v);
        o.Set("dims", e.index);
        o.Set("promptTokens", e.stats.promptTokens);
        o.Set("ms", e.stats.prefillMs);
        o.Set("retainedTokens", e.stats.retainedTokens);
        o.Set("retainRefused", e.stats.retainRefused);
        break;
      }
      case EventType::ToolCallDelta:
        o.Set("index", e.index);
        o.Set("text", Napi::String::New(env, e.text));
        break;
      case EventType::ToolCallEnd: {
        o.Set("index", e.index);
        o.Set("text", Napi::String::New(env, e.text));
        Napi::Int32Array t = Napi::Int32Array::New(env, e.tokens.size());
        std::copy(e.tokens.begin(), e.tokens.end(), t.Data());
        o.Set("tokens", t);
        o.Set("truncated", e.truncated);
        break;
      }
    }
    arr.Set(i++, o);
  }
  return arr;
}

}  // namespace llamux
