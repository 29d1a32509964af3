# The Python package (python/): CIUIC_WITH_PYTHON=AUTO|ON|OFF. The
# interpreter is the python3 on PATH unless -DPython3_EXECUTABLE= names one;
# pybind11 comes from that interpreter's site-packages (pinned in
# python/requirements.txt), never from the network.
set(_ciuic_python_found FALSE)
set(_ciuic_python_hint "a python3 with its headers and pybind11 (pip install -r python/requirements.txt)")
if(NOT CIUIC_WITH_PYTHON STREQUAL "OFF")
  if(NOT Python3_EXECUTABLE)
    find_program(CIUIC_PYTHON3_ON_PATH python3 NO_CACHE)
    if(CIUIC_PYTHON3_ON_PATH)
      # A pyenv shim resolves to the real interpreter.
      execute_process(COMMAND ${CIUIC_PYTHON3_ON_PATH} -c "import sys; print(sys.executable)"
                      OUTPUT_VARIABLE _ciuic_py_exe OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _ciuic_py_rc)
      if(_ciuic_py_rc EQUAL 0 AND _ciuic_py_exe)
        set(Python3_EXECUTABLE ${_ciuic_py_exe} CACHE FILEPATH "The Python the package is built for (default: python3 on PATH)")
      endif()
    endif()
  endif()
  if(Python3_EXECUTABLE)
    find_package(Python3 COMPONENTS Interpreter Development.Module)
  endif()
  if(Python3_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -m pybind11 --cmakedir
                    OUTPUT_VARIABLE _ciuic_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _ciuic_pybind11_rc ERROR_QUIET)
    if(_ciuic_pybind11_rc EQUAL 0)
      find_package(pybind11 CONFIG HINTS ${_ciuic_pybind11_dir})
    endif()
    if(pybind11_FOUND)
      set(_ciuic_python_found TRUE)
    else()
      set(_ciuic_python_hint "pybind11 for ${Python3_EXECUTABLE}: ${Python3_EXECUTABLE} -m pip install -r python/requirements.txt")
    endif()
  elseif(Python3_EXECUTABLE)
    set(_ciuic_python_hint "the headers of ${Python3_EXECUTABLE} (Python3 Development.Module)")
  endif()
endif()
ciuic_resolve(CIUIC_WITH_PYTHON _ciuic_python_found "${_ciuic_python_hint}")
if(CIUIC_WITH_PYTHON_ENABLED)
  message(STATUS "ciuic Python package: ${Python3_EXECUTABLE} (${Python3_VERSION}), pybind11 ${pybind11_VERSION}")
  # Where `cmake --install --prefix P` puts the package, relative to P: the
  # interpreter's own layout (lib/pythonX.Y/site-packages for CPython).
  execute_process(COMMAND ${Python3_EXECUTABLE} -c
    "import sysconfig; print(sysconfig.get_path('platlib', vars={'platbase': '/', 'base': '/'}).lstrip('/'))"
    OUTPUT_VARIABLE _ciuic_py_site OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(CIUIC_PYTHON_INSTALL_DIR "${_ciuic_py_site}" CACHE STRING
      "Install directory of the package ciuic, relative to the prefix")
endif()
