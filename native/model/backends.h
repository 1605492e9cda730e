// Loading ggml's backends. In the default (variants) build the CPU backend exists once per
// ISA level as libggml-cpu-<variant>.so next to llamux.node, and GPU/RPC backends as
// libggml-<name>.so; this picks and loads them once per process.
#pragma once
#include <string>
#include <vector>

namespace llamux {

struct BackendReport {
  std::string buildKind;               // "variants" or "native"
  std::string directory;               // where backends were looked for ("" for native)
  std::string cpuVariant;              // e.g. "zen4", "haswell"; "native" for a native build
  std::vector<std::string> loaded;     // file names of the loaded backend libraries
  std::vector<std::string> available;  // CPU variants found, with their score ("zen4:…")
  std::string error;                   // why no CPU backend could be loaded ("" if fine)
};

// Loads the backends (once per process; later calls return the first report).
// LLAMUX_CPU_VARIANT=<name> forces a CPU variant (benchmarks, troubleshooting).
// LLAMUX_BACKEND_FILES=<file>[:<file>] loads these backend libraries too, before the folder's.
const BackendReport &LoadBackends();

}  // namespace llamux
