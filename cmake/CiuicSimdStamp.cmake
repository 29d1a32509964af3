# Script mode (cmake -P): writes OUT = "<ID> <sha256 of FILES' contents>",
# FILES separated by '|'. The identity of a built libciuic_simd.a that
# sanitizer builds importing it (CIUIC_SIMD_FROM) compare with their own
# sources; kernels/CMakeLists.txt computes the same with ciuic_simd_digest.
string(REPLACE "|" ";" _files "${FILES}")
set(_all "")
foreach(_f IN LISTS _files)
  file(SHA256 "${_f}" _h)
  string(APPEND _all "${_h}")
endforeach()
string(SHA256 _digest "${_all}")
file(WRITE "${OUT}" "${ID} ${_digest}")
