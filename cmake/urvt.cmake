# Warnings, sanitizers and small helpers shared by every target.
set(URVT_WARNINGS -Wall -Wextra -Wshadow -Wformat=2 -Wmissing-prototypes
    -Wstrict-prototypes -Wno-unused-parameter)
if(URVT_WERROR)
  list(APPEND URVT_WARNINGS -Werror)
endif()
add_compile_options(${URVT_WARNINGS} -fno-strict-aliasing)
add_compile_definitions(_GNU_SOURCE)

if(URVT_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(URVT_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT URVT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "URVT_SANITIZE must be empty, address or thread")
endif()

find_package(PkgConfig REQUIRED)
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)

# urvt_add_unit_test(NAME SOURCES... LIBS ... [LABELS ...] [PATHS udp shm]): a
# cmocka test registered with CTest. PATHS: again as NAME_path_P with the
# device's own QPs forced onto link P (URVT_PATH, docs/usage.md), passing
# only if the counters show the packets on that link (tests/lib/on_path.sh);
# label "path" only (not under TSan: some poll memory a UC WRITE lands in).
function(urvt_add_unit_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS;PATHS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CMOCKA Threads::Threads)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT 120 LABELS "unit;${T_LABELS}")
  foreach(path ${T_PATHS})
    add_test(NAME ${name}_path_${path}
             COMMAND ${PROJECT_SOURCE_DIR}/tests/lib/on_path.sh ${path} $<TARGET_FILE:${name}>)
    set_tests_properties(${name}_path_${path} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
      LABELS "path" ENVIRONMENT "URVT_STAT=${PROJECT_BINARY_DIR}/bin/urvt-stat")
  endforeach()
endfunction()

# In sanitizer builds, uninstrumented programs (Debian's ibverbs-utils and
# perftest binaries) that load urvt's instrumented library need the
# sanitizer runtime preloaded. URVT_SANITIZER_ENV is the CTest ENVIRONMENT
# entry for such tests (empty in plain builds); their own leaks are not ours.
set(URVT_SANITIZER_ENV "")
# The build tree's urvt-run preloads URVT_SANITIZER_RUNTIME itself (tools/);
# tests that are shell scripts around it want only URVT_SANITIZER_OPTIONS
# (a sanitizer preloaded into the shell itself breaks it under TSan).
set(URVT_SANITIZER_RUNTIME "")
set(URVT_SANITIZER_OPTIONS "")
if(URVT_SANITIZE)
  if(URVT_SANITIZE STREQUAL "address")
    set(_rt_gnu libasan.so)
    set(_rt_clang libclang_rt.asan-x86_64.so)
  else()
    set(_rt_gnu libtsan.so)
    set(_rt_clang libclang_rt.tsan-x86_64.so)
  endif()
  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    set(_rt ${_rt_clang})
  else()
    set(_rt ${_rt_gnu})
  endif()
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=${_rt}
                  OUTPUT_VARIABLE _rt_path OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(IS_ABSOLUTE "${_rt_path}")
    set(URVT_SANITIZER_RUNTIME "${_rt_path}")
    set(URVT_SANITIZER_OPTIONS "ASAN_OPTIONS=detect_leaks=0")
    set(URVT_SANITIZER_ENV "LD_PRELOAD=${_rt_path};ASAN_OPTIONS=detect_leaks=0")
  endif()
endif()
