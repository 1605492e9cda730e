// Test hooks over the plain C++ parts of the scheduler (exported as `testing.*`; the marker
// matcher and text stream hooks live in addon.cc).
#pragma once
#include <napi.h>

namespace llamux::testing {

// Adds planReuse(inputs) -> plan to exports.testing (reuse_planner.h).
void Init(Napi::Env env, Napi::Object exports);

// Adds flashAttentionCheck(shape) to the testing object (attention_check.cc).
void InitAttentionCheck(Napi::Object testing);

// Adds logitsTap(on) and takeLogits() (logits_tap.h, issue 26).
void InitLogitsTap(Napi::Object testing);

}  // namespace llamux::testing
