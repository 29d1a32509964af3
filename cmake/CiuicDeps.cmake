# System dependencies only; nothing is downloaded at build time.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

pkg_check_modules(HWY REQUIRED IMPORTED_TARGET libhwy)

# libcrypto (OpenSSL 3): SHA-256 and HMAC for the store's and the data
# connections' handshakes.
find_package(OpenSSL 3 COMPONENTS Crypto)
if(NOT OPENSSL_FOUND)
  message(FATAL_ERROR "libcrypto (OpenSSL 3) not found: apt-get install libssl-dev (tools/install-deps.sh)")
endif()

pkg_check_modules(HWLOC IMPORTED_TARGET hwloc)
ciuic_resolve(CIUIC_WITH_HWLOC HWLOC_FOUND "apt-get install libhwloc-dev")

pkg_check_modules(IBVERBS IMPORTED_TARGET libibverbs)
ciuic_resolve(CIUIC_WITH_VERBS IBVERBS_FOUND "apt-get install libibverbs-dev")

# PMIx client: rank, size and the store rendezvous when the launcher (mpirun,
# srun --mpi=pmix, prterun) runs a PMIx server. Debian's pmix.pc points into
# a private prefix (pmix2/) and adds an rpath to it.
if(NOT CIUIC_WITH_PMIX STREQUAL "OFF")
  pkg_check_modules(PMIX IMPORTED_TARGET pmix)
endif()
ciuic_resolve(CIUIC_WITH_PMIX PMIX_FOUND "apt-get install libpmix-dev")

# CUDA: nvcc from PATH or /usr/local/cuda. Architectures: sm_80 and sm_90
# machine code plus compute_90 PTX for newer GPUs.
set(_ciuic_nvcc "")
if(NOT CIUIC_WITH_CUDA STREQUAL "OFF")
  find_program(CIUIC_NVCC nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
  if(CIUIC_NVCC)
    set(_ciuic_nvcc ${CIUIC_NVCC})
  endif()
endif()
set(_ciuic_cuda_found FALSE)
if(_ciuic_nvcc)
  set(CMAKE_CUDA_COMPILER ${_ciuic_nvcc})
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(_ciuic_cuda_found TRUE)
    endif()
  endif()
endif()
ciuic_resolve(CIUIC_WITH_CUDA _ciuic_cuda_found "install the CUDA toolkit (nvcc) under /usr/local/cuda")

set(_ciuic_nccl_found FALSE)
if(CIUIC_WITH_CUDA_ENABLED AND NOT CIUIC_WITH_NCCL STREQUAL "OFF")
  find_path(CIUIC_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  if(CIUIC_NCCL_INCLUDE)
    set(_ciuic_nccl_found TRUE)
  endif()
endif()
ciuic_resolve(CIUIC_WITH_NCCL _ciuic_nccl_found "NCCL headers (nccl.h) with the CUDA toolkit; needs CIUIC_WITH_CUDA")

if(CIUIC_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
