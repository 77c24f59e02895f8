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
