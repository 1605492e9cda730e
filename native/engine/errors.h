// The error codes of llamux, in one list. Plain C++ (no Node-API), so the engine thread can
// use them; napi_util.h turns a code and a message into a JS error. The TypeScript list in
// src/errors.ts (ERROR_CODES) must hold the same names: test/api/errors.test.ts reads this
// file and compares.
#pragma once

namespace llamux {

// X(enumerator, "CODE")
#define LLAMUX_ERROR_CODES(X)                          \
  X(InvalidArgument, "INVALID_ARGUMENT")               \
  X(ModelNotFound, "MODEL_NOT_FOUND")                  \
  X(ModelInvalid, "MODEL_INVALID")                     \
  X(Aborted, "ABORTED")                                \
  X(Disposed, "DISPOSED")                              \
  X(ContextCreateFailed, "CONTEXT_CREATE_FAILED")      \
  X(ContextOverflow, "CONTEXT_OVERFLOW")               \
  X(KvCacheFull, "KV_CACHE_FULL")                      \
  X(QueueFull, "QUEUE_FULL")                           \
  X(DecodeFailed, "DECODE_FAILED")                     \
  X(GrammarFailed, "GRAMMAR_FAILED")                   \
  X(NativeLoadFailed, "NATIVE_LOAD_FAILED")            \
  X(StateRestoreFailed, "STATE_RESTORE_FAILED")        \
  X(SessionBusy, "SESSION_BUSY")                       \
  X(TranscriptMismatch, "TRANSCRIPT_MISMATCH")         \
  X(Unsupported, "UNSUPPORTED")                        \
  X(RpcUnavailable, "RPC_UNAVAILABLE")                 \
  X(DownloadFailed, "DOWNLOAD_FAILED")                 \
  X(DownloadUnauthorized, "DOWNLOAD_UNAUTHORIZED")     \
  X(ChecksumMismatch, "CHECKSUM_MISMATCH")             \
  X(DiskFull, "DISK_FULL")                             \
  X(ModelTooLarge, "MODEL_TOO_LARGE")                  \
  X(Internal, "INTERNAL")

enum class ErrorCode {
#define LLAMUX_X(name, str) name,
  LLAMUX_ERROR_CODES(LLAMUX_X)
#undef LLAMUX_X
};

constexpr const char *ErrorCodeName(ErrorCode c) {
  switch (c) {
#define LLAMUX_X(name, str) \
  case ErrorCode::name:     \
    return str;
    LLAMUX_ERROR_CODES(LLAMUX_X)
#undef LLAMUX_X
  }
  return "INTERNAL";
}

}  // namespace llamux
