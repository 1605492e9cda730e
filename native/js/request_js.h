// Readers of the JS objects the TS mappers (src/native/request.ts) build: every key is
// required, so a missing or mistyped one is a bug between our own layers and throws a
// TypeError naming the key. Used by Context (context.cc) for requests, session commands and
// the context config.
#pragma once
#include <napi.h>
#include <llama.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace llamux {

[[noreturn]] void MissingKey(Napi::Env env, const char *key, const char *expected);
bool RequireBool(Napi::Env env, const Napi::Object &o, const char *key);
double RequireNumber(Napi::Env env, const Napi::Object &o, const char *key);
int64_t RequireInt(Napi::Env env, const Napi::Object &o, const char *key);
std::string RequireString(Napi::Env env, const Napi::Object &o, const char *key);
Napi::Int32Array RequireInt32Array(Napi::Env env, const Napi::Object &o, const char *key);
Napi::Float32Array RequireFloat32Array(Napi::Env env, const Napi::Object &o, const char *key);
// A required Int32Array of token ids, each checked against the vocabulary.
void ReadVocabTokens(Napi::Env env, const Napi::Object &o, const char *key, int32_t nVocab, std::vector<llama_token> *dst);
// `textDrop`: token ids, sequences separated by -1.
void ReadDropTokens(Napi::Env env, const Napi::Object &o, int32_t nVocab, std::vector<llama_token> *dst);
// The sampling fields of a request (temperature … logit bias), checked against the vocabulary.
void ReadSampling(Napi::Env env, const Napi::Object &o, SamplerParams &s, int32_t nVocab);

}  // namespace llamux
