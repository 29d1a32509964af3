# The torch.distributed backend (python/src/torch_backend.cc):
# CIUIC_WITH_TORCH=AUTO|ON|OFF, built only with the Python package and the
# torch installed for its interpreter. Not find_package(Torch): on PyPI's CUDA
# wheels its Caffe2 config fails without a CUDA toolkit, and the backend needs
# only torch's headers and four libraries (what torch.utils.cpp_extension
# links). torch's own pybind11 types (Store, Backend) must be visible to the
# extension: the same pybind11 release (its internals ABI) is required.
set(_ciuic_torch_found FALSE)
set(_ciuic_torch_hint "torch for the Python package's interpreter (pip install -r python/requirements.txt)")
if(NOT CIUIC_WITH_TORCH STREQUAL "OFF" AND CIUIC_WITH_PYTHON_ENABLED)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c
    "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__.split('+')[0]); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
    OUTPUT_VARIABLE _ciuic_torch_out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _ciuic_torch_rc ERROR_QUIET)
  if(_ciuic_torch_rc EQUAL 0)
    string(REPLACE "\n" ";" _ciuic_torch_out "${_ciuic_torch_out}")
    list(GET _ciuic_torch_out 0 CIUIC_TORCH_DIR)
    list(GET _ciuic_torch_out 1 CIUIC_TORCH_VERSION)
    list(GET _ciuic_torch_out 2 CIUIC_TORCH_CXX11_ABI)
    set(CIUIC_TORCH_LIBRARIES "")
    foreach(lib c10 torch torch_cpu torch_python)
      find_library(CIUIC_TORCH_LIB_${lib} ${lib} PATHS ${CIUIC_TORCH_DIR}/lib NO_DEFAULT_PATH NO_CACHE)
      list(APPEND CIUIC_TORCH_LIBRARIES ${CIUIC_TORCH_LIB_${lib}})
    endforeach()
    file(STRINGS ${CIUIC_TORCH_DIR}/include/pybind11/detail/common.h _ciuic_tpb REGEX "define PYBIND11_VERSION_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" CIUIC_TORCH_PYBIND11 "${_ciuic_tpb}")
    if(NOT CIUIC_TORCH_LIBRARIES MATCHES "NOTFOUND" AND CIUIC_TORCH_PYBIND11 VERSION_EQUAL pybind11_VERSION)
      set(_ciuic_torch_found TRUE)
    elseif(NOT CIUIC_TORCH_PYBIND11 VERSION_EQUAL pybind11_VERSION)
      set(_ciuic_torch_hint "pybind11 ${CIUIC_TORCH_PYBIND11}, the release torch ${CIUIC_TORCH_VERSION} was built with (found ${pybind11_VERSION})")
    else()
      set(_ciuic_torch_hint "torch's libraries c10, torch, torch_cpu, torch_python under ${CIUIC_TORCH_DIR}/lib")
    endif()
  endif()
elseif(NOT CIUIC_WITH_PYTHON_ENABLED)
  set(_ciuic_torch_hint "the Python package (CIUIC_WITH_PYTHON)")
endif()
ciuic_resolve(CIUIC_WITH_TORCH _ciuic_torch_found "${_ciuic_torch_hint}")
if(CIUIC_WITH_TORCH_ENABLED)
  message(STATUS "ciuic torch backend: torch ${CIUIC_TORCH_VERSION} at ${CIUIC_TORCH_DIR} (CXX11 ABI ${CIUIC_TORCH_CXX11_ABI}, pybind11 ${CIUIC_TORCH_PYBIND11})")
endif()
