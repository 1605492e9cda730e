// Why a request's generation ended, in one list: the final event's `finishReason` names
// (src/native/binding.ts types the same strings). Plain C++, like the error codes in errors.h.
#pragma once
#include <cstdint>

namespace llamux {

// X(enumerator, "name")
#define LLAMUX_FINISH_REASONS(X)                                                        \
  X(Eog, "eog")           /* an end-of-generation token */                             \
  X(Stop, "stop")         /* a stop string matched */                                  \
  X(Length, "length")     /* maxTokens, or the sequence is full */                      \
  X(ToolCall, "toolCall") /* the first tool-call span closed (no parallel tool calls) */ \
  X(Prefill, "prefill")   /* prefillOnly: the prompt's KV is warm */                    \
  X(Abort, "abort")       /* cancelled (code ABORTED) */                                \
  X(Error, "error")       /* failed (a code and a message) */

enum class FinishReason : uint8_t {
#define LLAMUX_X(name, str) name,
  LLAMUX_FINISH_REASONS(LLAMUX_X)
#undef LLAMUX_X
};

constexpr const char *FinishReasonName(FinishReason r) {
  switch (r) {
#define LLAMUX_X(name, str) \
  case FinishReason::name:  \
    return str;
    LLAMUX_FINISH_REASONS(LLAMUX_X)
#undef LLAMUX_X
  }
  return "error";
}

}  // namespace llamux
