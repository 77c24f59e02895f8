# Helpers shared by tests, benchmarks and examples.

# Warnings for our own code (not the consumer's).
set(Q35_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wno-missing-field-initializers)

# q35_cuda_twin(<target> <sources...>): the CUDA build of sources written for the sim build.
# Each .cpp is compiled as CUDA through a generated one-line .cu wrapper, so one source serves both.
function(q35_cuda_sources out_var)
  set(result)
  foreach(src IN LISTS ARGN)
    get_filename_component(abs "${src}" ABSOLUTE)
    file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${abs}")
    string(REGEX REPLACE "\\.cpp$" ".cu" cu "${PROJECT_BINARY_DIR}/cuda_twins/${rel}")
    file(GENERATE OUTPUT "${cu}" CONTENT "#include \"${abs}\"\n")
    list(APPEND result "${cu}")
  endforeach()
  set(${out_var} ${result} PARENT_SCOPE)
endfunction()

# Flags for every CUDA target we build: report registers/spills per kernel, keep line info.
set(Q35_CUDA_FLAGS $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v --generate-line-info -Xcudafe=--display_error_number>)

# q35_shared_kernels(<target> <PUBLIC|PRIVATE> <cpp|cu>): the GEMV/GEMM kernels that launch::matmul and
# launch::gemv<F> reach are compiled once for the target, in a generated unit, instead of in each of its
# units that call them (launch/matmul.hpp: Q35_KERNELS_EXTERN / Q35_KERNELS_INSTANTIATE). For targets
# with several such units; PUBLIC for a library whose dependents call them too.
function(q35_shared_kernels target scope ext)
  set(src "${PROJECT_BINARY_DIR}/kernel_instances/${target}.${ext}")
  file(GENERATE OUTPUT "${src}"
       CONTENT "// generated: the program's one copy of launch::matmul's and launch::gemv's kernels\n#define Q35_KERNELS_INSTANTIATE\n#include \"q35/launch/matmul.hpp\"\n")
  target_sources(${target} PRIVATE "${src}")
  target_compile_definitions(${target} ${scope} Q35_KERNELS_EXTERN)
endfunction()
