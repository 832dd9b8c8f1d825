# Which device backends this build has. CPU is always present; CUDA and HIP are optional.
set(PACHECK_BACKENDS "cpu")
set(PACHECK_HAVE_CUDA OFF)
if(NOT PACHECK_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(PACHECK_HAVE_CUDA ON)
    list(APPEND PACHECK_BACKENDS "cuda(sm_${CMAKE_CUDA_ARCHITECTURES})")
  elseif(PACHECK_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PACHECK_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
# HIP: Debian's hipcc (clang 15) or a ROCm install's. Found when hipcc, the HIP runtime library and its
# headers are; the kernels are compiled by hipcc (custom commands in kernels/gpu/CMakeLists.txt, since
# CMake's HIP language wants a ROCm-layout clang), the backend's host code by the C++ compiler.
# One GPU runtime per binary: with CUDA also found, the HIP library is still built on request (target
# pacheck_hip, and pacheck_hip_kernels for the kernel objects alone, as ci/hip-build.sh does) but the pacheck
# binary and tests link CUDA; configure with -DPACHECK_CUDA=OFF for a HIP binary (docs/HIP.md).
set(PACHECK_HAVE_HIP OFF)   # HIP kernels and backend can be built
set(PACHECK_LINK_HIP OFF)   # ... and are linked into pacheck and the tests
if(NOT PACHECK_HIP STREQUAL "OFF")
  set(_rocm_hints $ENV{ROCM_PATH} $ENV{HIP_PATH} /opt/rocm)
  find_program(PACHECK_HIPCC hipcc HINTS ${_rocm_hints} PATH_SUFFIXES bin)
  find_library(PACHECK_AMDHIP64 amdhip64 HINTS ${_rocm_hints} PATH_SUFFIXES lib lib64)
  find_path(PACHECK_HIP_INCLUDE_DIR hip/hip_runtime.h HINTS ${_rocm_hints} PATH_SUFFIXES include)
  if(PACHECK_HIPCC AND PACHECK_AMDHIP64 AND PACHECK_HIP_INCLUDE_DIR)
    set(PACHECK_HAVE_HIP ON)
    string(REPLACE ";" "," _hip_archs "${PACHECK_HIP_ARCHITECTURES}")
    if(PACHECK_HAVE_CUDA)
      list(APPEND PACHECK_BACKENDS "hip(${_hip_archs}: built on request, not linked since CUDA is)")
    else()
      set(PACHECK_LINK_HIP ON)
      list(APPEND PACHECK_BACKENDS "hip(${_hip_archs})")
    endif()
  elseif(PACHECK_HIP STREQUAL "ON")
    message(FATAL_ERROR "PACHECK_HIP=ON but hipcc (${PACHECK_HIPCC}), libamdhip64 (${PACHECK_AMDHIP64}) or "
                        "hip/hip_runtime.h (${PACHECK_HIP_INCLUDE_DIR}) was not found; set ROCM_PATH")
  endif()
endif()

string(REPLACE ";" ", " _backends "${PACHECK_BACKENDS}")
message(STATUS "pacheck backends: ${_backends}")
