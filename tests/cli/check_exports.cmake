# ctest script: what LIBRARY (libflashcpp) exports. Fails when it exports
#   - a C (unmangled) symbol that is not flashcpp_*,
#   - anything in namespace flashcpp::capi (the C ABI's internals),
#   - not every function declared in HEADERS/*.h (the C ABI), or not the C++ API the tools and tests link to.
# The capi object file among OBJECTS ('|'-separated: the library's objects), where flashcpp::capi is defined, must
# match the capi pattern, so a pattern that matches nothing cannot pass silently.
foreach(var NM LIBRARY HEADERS OBJECTS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_exports.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "|" ";" objects "${OBJECTS}")
list(FILTER objects INCLUDE REGEX "capi/capi\\.cpp\\.o(bj)?$")
list(LENGTH objects n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one capi/capi.cpp object among the library's objects, found ${n}")
endif()
set(OBJECT "${objects}")

function(symbols out)
  execute_process(COMMAND ${NM} ${ARGN} OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${ARGN} failed (${rc})")
  endif()
  set(${out} "\n${text}" PARENT_SCOPE)
endfunction()
symbols(raw -D --defined-only ${LIBRARY})
symbols(demangled -D --defined-only -C ${LIBRARY})
symbols(object_symbols --defined-only -C ${OBJECT})

set(problems "")
# C symbols: every exported name that is not a mangled C++ one (_Z...).
string(REGEX MATCHALL "\n[0-9a-fA-F]+ [A-Za-z] [^\n]+" lines "${raw}")
set(exported_c "")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^\n[0-9a-fA-F]+ [A-Za-z] " "" name "${line}")
  if(name MATCHES "^_Z")
    continue()
  endif()
  list(APPEND exported_c "${name}")
  if(NOT name MATCHES "^flashcpp_")
    string(APPEND problems "  C symbol outside flashcpp_*: ${name}\n")
  endif()
endforeach()

set(capi_pattern "[^\n]*flashcpp::capi::[^\n]*")
string(REGEX MATCHALL "${capi_pattern}" capi "${demangled}")
foreach(line IN LISTS capi)
  string(APPEND problems "  C ABI internal: ${line}\n")
endforeach()
string(REGEX MATCHALL "${capi_pattern}" capi_in_object "${object_symbols}")
if(NOT capi_in_object)
  message(FATAL_ERROR "the pattern finds no flashcpp::capi symbol in ${OBJECT}: the check would not catch one")
endif()

# The C ABI: every function the headers declare.
file(GLOB headers "${HEADERS}/*.h")
set(declared_fns "")
foreach(h IN LISTS headers)
  file(READ "${h}" text)
  string(REGEX MATCHALL "flashcpp_[a-z0-9_]+\\(" calls "${text}")
  foreach(c IN LISTS calls)
    string(REPLACE "(" "" fn "${c}")
    list(APPEND declared_fns "${fn}")
    list(FIND exported_c "${fn}" at)
    if(at LESS 0)
      string(APPEND problems "  declared in ${h} but not exported: ${fn}\n")
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES declared_fns)
list(LENGTH declared_fns declared)

# The C++ API stays exported (a sample of what tools/ and tests/ call, and the exception type they catch).
foreach(api "flashcpp::rmsnorm(" "flashcpp::Runtime::create(" "flashcpp::mla::sparse_prefill(" "typeinfo for flashcpp::Error"
        "flashcpp::env::problems")
  string(FIND "${demangled}" "${api}" at)
  if(at LESS 0)
    string(APPEND problems "  C++ API not exported: ${api}\n")
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "${LIBRARY} exports the wrong symbols:\n${problems}")
endif()
list(LENGTH exported_c n_c)
list(LENGTH capi_in_object n_obj)
message(STATUS "${LIBRARY}: ${n_c} C symbols, all flashcpp_* (the ${declared} functions the headers declare, all exported); "
               "no flashcpp::capi symbol (${n_obj} in ${OBJECT})")
