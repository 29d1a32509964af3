# ciuic_option(NAME DOC): a tri-state option AUTO|ON|OFF. AUTO uses the
# dependency when found; ON fails the configure when it cannot be met;
# OFF never uses it.
function(ciuic_option name doc)
  set(${name} AUTO CACHE STRING "${doc}: AUTO|ON|OFF")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" v)
  if(NOT v MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name}=${${name}}: expected AUTO, ON or OFF")
  endif()
  set(${name} ${v} PARENT_SCOPE)
endfunction()

# ciuic_resolve(NAME FOUND HINT): turns the tri-state NAME into a boolean
# NAME_ENABLED, failing when NAME=ON but FOUND is false (HINT says how to fix).
function(ciuic_resolve name found hint)
  if(${name} STREQUAL "OFF")
    set(${name}_ENABLED OFF PARENT_SCOPE)
  elseif(${found})
    set(${name}_ENABLED ON PARENT_SCOPE)
  elseif(${name} STREQUAL "ON")
    message(FATAL_ERROR "${name}=ON but the dependency was not found: ${hint}")
  else()
    message(STATUS "${name}=AUTO: not found (${hint}); building without it")
    set(${name}_ENABLED OFF PARENT_SCOPE)
  endif()
endfunction()
