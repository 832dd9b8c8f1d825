# The HIP backend and GPU decode kernels (included by kernels/gpu/CMakeLists.txt when cmake/Backends.cmake
# found hipcc). The same sources as the CUDA build (PACHECK_GPU_KERNEL_SOURCES, PACHECK_GPU_HOST_SOURCES:
# kernels/gpu/CMakeLists.txt):
#   - the .cu kernel TUs are compiled by hipcc as HIP (-x hip), once per PACHECK_HIP_ARCHITECTURES target
#     (default gfx90a = CDNA wave64, gfx1030 = RDNA wave32), into plain object files: custom commands rather
#     than CMake's HIP language, which expects a ROCm-layout clang and does not accept Debian's hipcc;
#   - the host TUs (device backend, runtime helpers, kernel registration) by the C++ compiler against the HIP
#     headers (__HIP_PLATFORM_AMD__), with PACHECK_GPU_HIP selecting the HIP half of gpu_runtime.hpp.
# Targets:
#   pacheck_hip_kernels  the kernel objects alone (ci/hip-build.sh builds just this: wave-size and CUDA-only
#                        mistakes fail here, in seconds of hipcc per TU and target);
#   pacheck_hip          static library: objects + host TUs, linked against libamdhip64. Linked into pacheck
#                        and the tests when CUDA is off (PACHECK_LINK_HIP), otherwise built only on request.
set(PACHECK_HIP_FLAGS "" CACHE STRING "Extra hipcc flags for the HIP kernel objects (ci/hip-build.sh: -Werror)")

set(_hip_arch_flags)
foreach(arch ${PACHECK_HIP_ARCHITECTURES})
  list(APPEND _hip_arch_flags --offload-arch=${arch})
endforeach()
set(_hip_include_flags)
foreach(dir ${PACHECK_INCLUDE_DIRS})
  list(APPEND _hip_include_flags -I${dir})
endforeach()
# Same optimisation as the CUDA build's configuration; no fast-math (exp2f keeps its accuracy bound).
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  set(_hip_opt_flags -O0 -g)
else()
  set(_hip_opt_flags -O3 -DNDEBUG)
endif()
separate_arguments(_hip_extra_flags UNIX_COMMAND "${PACHECK_HIP_FLAGS}")

set(_hip_objects)
foreach(src ${PACHECK_GPU_KERNEL_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/hip/${name}.o)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/hip
    COMMAND ${PACHECK_HIPCC} -x hip ${_hip_arch_flags} -std=c++17 -fPIC ${_hip_opt_flags} -Wall -Wextra
            ${_hip_extra_flags} ${_hip_include_flags} -MD -MF ${obj}.d -c ${src} -o ${obj}
    DEPENDS ${src}
    DEPFILE ${obj}.d
    COMMENT "hipcc ${name}.cu for ${PACHECK_HIP_ARCHITECTURES}"
    VERBATIM)
  list(APPEND _hip_objects ${obj})
endforeach()
add_custom_target(pacheck_hip_kernels DEPENDS ${_hip_objects})

add_library(pacheck_hip STATIC ${PACHECK_GPU_HOST_SOURCES} ${_hip_objects})
set_source_files_properties(${_hip_objects} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
add_dependencies(pacheck_hip pacheck_hip_kernels)
target_include_directories(pacheck_hip PUBLIC ${PACHECK_INCLUDE_DIRS})
# /usr/include (Debian) is already searched; naming it again as a system directory would break libstdc++'s
# include_next.
if(NOT PACHECK_HIP_INCLUDE_DIR STREQUAL "/usr/include")
  target_include_directories(pacheck_hip SYSTEM PRIVATE ${PACHECK_HIP_INCLUDE_DIR})
endif()
target_compile_definitions(pacheck_hip PRIVATE PACHECK_GPU_HIP=1 __HIP_PLATFORM_AMD__=1 PUBLIC PACHECK_HAVE_HIP=1)
target_link_libraries(pacheck_hip PUBLIC ${PACHECK_AMDHIP64} pacheck_faults pacheck_oracle)
if(NOT PACHECK_LINK_HIP)
  set_target_properties(pacheck_hip PROPERTIES EXCLUDE_FROM_ALL ON)
endif()
