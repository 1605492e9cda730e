// Prints ggml_backend_score() of one x86 CPU variant on the machine that configures the
// build: ggml's own feature check (cpu-feats.cpp, compiled with the variant's GGML_*
// definitions and no -march flags), the same function native/model/backends.cc calls in each
// libggml-cpu-<variant> at run time. CMakeLists.txt runs it once per variant when
// LLAMUX_CPU_VARIANTS=host, to build only the baseline and the variant this CPU would load.
#include <cstdio>

#include "ggml-cpu/arch/x86/cpu-feats.cpp"

int main() {
  std::printf("%d\n", ggml_backend_score());
  return 0;
}
