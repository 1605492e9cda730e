/* Stands in for a ggml CPU backend variant that this build leaves out (LLAMUX_CPU_VARIANTS
 * in CMakeLists.txt). ggml's CMake makes every variant a dependency of libggml, so each one
 * must build; this keeps the ones we do not ship to one empty file. They are not copied next
 * to llamux.node, so ggml never loads them. */
typedef int llamux_unused_cpu_variant;
