// Error codes shared by every native class. JS turns { code, message } into a LlamuxError.
#pragma once
#include <napi.h>
#include <string>

namespace llamux {

// Throws a JS Error carrying a stable `code` property.
[[noreturn]] inline void ThrowCoded(Napi::Env env, const char *code, const std::string &message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, code));
  throw err;
}

inline Napi::Error CodedError(Napi::Env env, const char *code, const std::string &message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, code));
  return err;
}

}  // namespace llamux
