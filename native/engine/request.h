// Plain data that crosses between the JS thread and the engine thread.
#pragma once
#include <llama.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/errors.h"
#include "engine/finish_reason.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"
#include "engine/text_stream.h"
#include "model/adapter.h"
#include "media/projector.h"

namespace llamux {

using Clock = std::chrono::steady_clock;

// A session command (ctx.endSession / forkSession): it travels in the request queue, so it
// keeps its place among requests, but runs no decode and ends with a SessionDone event.
// A session is a handle (a number the native Context hands out, Context.openSession), never a
// name looked up again; 0 is no session.
using SessionHandle = uint64_t;

struct SessionCommand {
  enum class Op : uint8_t { End, Fork } op = Op::End;
  SessionHandle from = 0;  // Fork: the session copied into RequestParams::session
};

// What a request does when its sequence is full (engine/context_shift.h).
enum class Overflow : uint8_t {
  Stop,       // a prompt that does not fit fails (CONTEXT_OVERFLOW); generation ends (length)
  Shift,      // keep the first nKeep tokens, drop the oldest half of the rest, go on (KV shift)
  Reprefill,  // the same window, recomputed from nKeep on (exact; any memory)
};

// Every field is read from a required key of the JS request (src/native/request.ts builds it
// complete); the initialisers are neutral zeros, not defaults.
struct RequestParams {
  uint64_t id = 0;
  std::vector<llama_token> promptTokens;
  int32_t maxTokens = 0;  // -1: until end of generation or the context end
  std::vector<std::string> stops;
  SamplerParams sampling;
  bool emitTokenIds = false;   // token ids travel with text events
  bool renderSpecial = false;  // render control tokens into the text
  int32_t logprobs = -1;       // >= 0: each generated token's logprob and this many top alternatives
  // KV reuse
  SessionHandle session = 0;      // pin a sequence across requests (0 = none)
  std::string sessionName;        // the session's name, for messages only
  std::string cacheScope;         // reuse KV only within this scope ("" = shared; scoped KV stays out of the tiers);
                                  // with adapters it is AdapterScope(scope, adapters): their KV is scoped too
  AdapterSet adapters;            // LoRA adapters this request decodes with (empty: the base model)
  bool waitForSession = false;    // wait instead of SESSION_BUSY
  int64_t sessionTtlMs = 0;       // this session's idle TTL (-1: the context's sessionTtlMs)
  bool continueSession = false;   // prompt = the session's committed tokens + this prompt
  bool hasExpect = false;         // verify the committed tokens (TRANSCRIPT_MISMATCH)
  std::vector<llama_token> expectCommitted;
  bool prefillOnly = false;       // warm the prompt's KV, generate nothing
  bool speculative = false;       // draft and verify when the context speculates (speculative.h)
  bool progress = false;          // a Progress event after each prefill chunk
  Overflow overflow = Overflow::Stop;
  int32_t nKeep = 0;              // tokens a context shift keeps at the start (BOS kept besides); -1: the prompt
  // Prompt-cache breakpoints (kv/prefix_retention.h): the prefix of `tokens` prompt tokens is
  // kept in the RAM and disk tiers for `ms`, ascending by tokens, at most 4.
  struct RetainPoint {
    size_t tokens = 0;
    int64_t ms = 0;
  };
  std::vector<RetainPoint> retain;
  std::unique_ptr<SessionCommand> command;  // set: a session command, not a generation
  bool detectToolCalls = false;   // detect spans when the context has markers
  bool greedyToolSyntax = false;  // sample the wrapper syntax with the greedy chain
  // Tool-call grammar (per request; empty: spans are unconstrained). It covers a whole span,
  // start marker to end marker, and is active inside spans only, or from the first token when
  // `toolRequired` (toolChoice 'required' or a named tool) until the first span closes.
  std::string toolGrammar;
  std::string toolGrammarRoot;
  bool toolRequired = false;
  bool parallelToolCalls = false;  // false: generation ends when the first span closes
  int32_t toolEndEog = 0;          // the end marker when it is one end-of-generation token, else -1
  // Reasoning spans (empty start/end: no reasoning detection). Tokens between the markers are
  // reasoning events, apart from text; `reasoningOpen`: the prompt opened the span already.
  std::vector<llama_token> reasoningStart, reasoningEnd;
  bool reasoningOpen = false;
  int32_t reasoningBudget = -1;  // >= 0: after this many reasoning tokens the end marker is forced
  // Channel headers dropped from text (Harmony's `<|start|>assistant`, `<|channel|>final<|message|>`):
  // token sequences, matched after reasoning spans and before tool-call spans.
  std::vector<std::vector<llama_token>> textDrop;
  // The images and audio clips whose runs of media ids (media/media_ids.h) the prompt holds.
  std::vector<media::MediaChunkPtr> media;
};

struct FinalStats {
  int32_t promptTokens = 0;
  int32_t reusedTokens = 0;     // prompt tokens served from KV already computed
  int32_t prefilledTokens = 0;  // prompt tokens decoded for this request
  int32_t generatedTokens = 0;
  double queuedMs = 0;
  double ttftMs = -1;
  double prefillMs = 0;
  double decodeMs = 0;
  double prefillTokensPerSec = 0;
  double decodeTokensPerSec = 0;
  double sampleMs = 0;  // time in the sampler (chains and grammars), all tokens together
  std::string cacheOutcome = "cold";  // exact | partial | sticky | restored | cold
  std::string cacheTier;              // live | shared | ram (empty when cold)
  double restoreMs = 0;
  int32_t checkpoint = -1;  // recurrent/hybrid memory: the checkpoint position restored (-1: none)
  int32_t draftedTokens = 0;   // speculative decoding: draft tokens verified
  int32_t acceptedTokens = 0;  // of which the output kept
  int32_t shiftedTokens = 0;   // tokens a context shift dropped (prompt and generation)
  int32_t retainedTokens = 0;  // the longest breakpoint prefix this request wrote to a tier (0: none)
  int32_t retainRefused = 0;   // breakpoints whose prefix no tier took (budget, no tier, scoped KV)
};

enum class EventType : uint8_t {
  Ready = 0,
  Text = 1,
  Final = 2,
  CreateFailed = 3,  // the llama_context could not be created
  Closed = 4,
  ToolCallStart = 5,
  ToolCallDelta = 6,
  ToolCallEnd = 7,
  SessionDone = 8,  // a session command finished (code/message set when it failed)
  RpcFailed = 9,    // an RPC server of the model died: every request fails (posted by the monitor)
  Reasoning = 10,   // reasoning text (and its tokens, markers included) apart from text
  Embedded = 11,    // an embed/rerank job ended: `floats` (index = dims per input), or code/message
  Progress = 12,    // prefill progress: stats.promptTokens (total), reusedTokens, prefilledTokens so far, prefillMs
};

struct ReadyInfo {
  // Named as in the JS ready report (ContextSettings).
  uint32_t contextSize = 0, sequenceContextSize = 0, batchSize = 0, microBatchSize = 0, sequences = 0;
  int32_t threads = 0, batchThreads = 0;
  bool unifiedKv = false;
  int32_t flashAttention = -1;
  int32_t kvTypeK = 0, kvTypeV = 0;
  bool canTruncateKv = true;
  std::string speculative = "off";  // the drafting mode applied ("off", "ngram", "draft", "mtp")
  std::string speculativeOff;       // why a requested mode is off ("" when it is on or was not asked)
  std::string layoutKey;  // LayoutKey() (hash.h): which saved states and prefix keys fit this context
};

struct Event {
  EventType type = EventType::Text;
  uint64_t id = 0;
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finishReason = FinishReason::Eog;  // Final events
  std::string code, message;  // errors
  std::string stop;           // the stop string that matched
  int32_t index = -1;         // tool-call span index within the request
  bool truncated = false;     // a span still open when generation ended
  std::vector<TokenLogprob> logprobs;  // Text and Final events: tokens sampled since the last event
  FinalStats stats;
  ReadyInfo ready;
  std::vector<float> floats;  // Embedded: the pooled vectors (or scores), input after input

  // The one builder of a request's last event; Abort and Error carry a code and a message.
  static Event Final(uint64_t id, FinishReason reason, const FinalStats &stats) {
    Event ev;
    ev.type = EventType::Final;
    ev.id = id;
    ev.finishReason = reason;
    ev.stats = stats;
    return ev;
  }
  static Event SessionDone(uint64_t id) {
    Event ev;
    ev.type = EventType::SessionDone;
    ev.id = id;
    return ev;
  }
  static Event SessionFailed(uint64_t id, ErrorCode code, const std::string &message) {
    Event ev = SessionDone(id);
    ev.code = ErrorCodeName(code);
    ev.message = message;
    return ev;
  }
  static Event Failed(uint64_t id, ErrorCode code, const std::string &message, const FinalStats &stats) {
    Event ev = Final(id, code == ErrorCode::Aborted ? FinishReason::Abort : FinishReason::Error, stats);
    ev.code = ErrorCodeName(code);
    ev.message = message;
    return ev;
  }
};

}  // namespace llamux
