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

# urvt_add_unit_test(NAME SOURCES... LIBS ...): a cmocka test registered with CTest.
function(urvt_add_unit_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CMOCKA Threads::Threads)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT 120 LABELS "unit;${T_LABELS}")
endfunction()
