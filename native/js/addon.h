// Per-process and per-environment state: llama backend init, log routing, cleanup.
#pragma once
#include <napi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace llamux {

// Initialises the llama backend once per process (workers share it).
void EnsureBackend();

// Captures llama.cpp log lines written on the current thread while alive, so a failed
// load can say why ("unknown model architecture ...") instead of just "failed".
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  std::string Text() const;
  void Append(int level, const char *text);

 private:
  std::string text_;
  LogCapture *prev_;
};

namespace addon {
Napi::Object Init(Napi::Env env, Napi::Object exports);
// The Model constructor of this environment (each worker thread has its own).
Napi::FunctionReference &ModelConstructor(Napi::Env env);
}

}  // namespace llamux
