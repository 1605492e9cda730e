// One-line argument guards in the style of better-sqlite3's REQUIRE_ARGUMENT_* macros.
// Options are validated by zod in TypeScript; these only stop what would crash.
#pragma once
#include <napi.h>
#include "engine/errors.h"

#define LLAMUX_REQUIRE_STRING(info, i, name)                                         \
  if ((info).Length() <= (i) || !(info)[i].IsString())                               \
    throw Napi::TypeError::New((info).Env(), "Expected argument " #i " (" name ") to be a string")

#define LLAMUX_REQUIRE_NUMBER(info, i, name)                                         \
  if ((info).Length() <= (i) || !(info)[i].IsNumber())                               \
    throw Napi::TypeError::New((info).Env(), "Expected argument " #i " (" name ") to be a number")

#define LLAMUX_REQUIRE_OBJECT(info, i, name)                                         \
  if ((info).Length() <= (i) || !(info)[i].IsObject())                               \
    throw Napi::TypeError::New((info).Env(), "Expected argument " #i " (" name ") to be an object")

#define LLAMUX_REQUIRE_FUNCTION(info, i, name)                                       \
  if ((info).Length() <= (i) || !(info)[i].IsFunction())                             \
    throw Napi::TypeError::New((info).Env(), "Expected argument " #i " (" name ") to be a function")

#define LLAMUX_REQUIRE_INT32ARRAY(info, i, name)                                     \
  if ((info).Length() <= (i) || !(info)[i].IsTypedArray() ||                         \
      (info)[i].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)         \
    throw Napi::TypeError::New((info).Env(), "Expected argument " #i " (" name ") to be an Int32Array")

namespace llamux {

// A JS Error carrying a stable `code` property (one of errors.h).
inline Napi::Error CodedError(Napi::Env env, ErrorCode code, const std::string &message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, ErrorCodeName(code)));
  return err;
}

[[noreturn]] inline void ThrowCoded(Napi::Env env, ErrorCode code, const std::string &message) {
  throw CodedError(env, code, message);
}

inline bool GetBool(const Napi::Object &o, const char *key, bool def) {
  Napi::Value v = o.Get(key);
  return v.IsBoolean() ? v.As<Napi::Boolean>().Value() : def;
}
inline double GetNumber(const Napi::Object &o, const char *key, double def) {
  Napi::Value v = o.Get(key);
  return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : def;
}
inline int64_t GetInt(const Napi::Object &o, const char *key, int64_t def) {
  Napi::Value v = o.Get(key);
  return v.IsNumber() ? v.As<Napi::Number>().Int64Value() : def;
}
inline std::string GetString(const Napi::Object &o, const char *key, const std::string &def) {
  Napi::Value v = o.Get(key);
  return v.IsString() ? v.As<Napi::String>().Utf8Value() : def;
}

}  // namespace llamux
