# dsinfer_keep_out_of_unity(<sources...>)
# A Highway file re-includes itself once per SIMD target (HWY_TARGET_INCLUDE + foreach_target.h); two
# of them in one unity source would re-expand each other, so they are compiled alone. The sanitizer
# presets build with CMAKE_UNITY_BUILD (test files share their gtest and library headers per batch).
function(dsinfer_keep_out_of_unity)
  if(NOT CMAKE_UNITY_BUILD)
    return()
  endif()
  foreach(src ${ARGN})
    file(STRINGS ${src} self_include REGEX "HWY_TARGET_INCLUDE" LIMIT_COUNT 1)
    if(self_include)
      set_source_files_properties(${src} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
endfunction()

# dsinfer_part(NAME <part> [NON_RECURSIVE] [DEPS <targets...>] [PRIVATE_DEPS <targets...>])
# One static library per part of the map, from every .cpp below the current folder (only the folder
# itself with NON_RECURSIVE, for parts whose subfolders are libraries of their own).
function(dsinfer_part)
  cmake_parse_arguments(P "NON_RECURSIVE" "NAME" "DEPS;PRIVATE_DEPS" ${ARGN})
  if(P_NON_RECURSIVE)
    file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  else()
    file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  endif()
  if(NOT srcs)  # a part with headers only (so far)
    add_library(dsinfer_${P_NAME} INTERFACE)
    target_include_directories(dsinfer_${P_NAME} INTERFACE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(dsinfer_${P_NAME} INTERFACE ${P_DEPS} ${P_PRIVATE_DEPS})
    return()
  endif()
  dsinfer_keep_out_of_unity(${srcs})
  add_library(dsinfer_${P_NAME} STATIC ${srcs})
  target_include_directories(dsinfer_${P_NAME} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(dsinfer_${P_NAME} PUBLIC ${P_DEPS} PRIVATE ${P_PRIVATE_DEPS})
endfunction()

# The source tree's path for the tests, compiled into one file only (see tests/test_paths.h).
add_library(dsinfer_test_paths STATIC ${CMAKE_SOURCE_DIR}/tests/test_paths.cpp ${CMAKE_SOURCE_DIR}/tests/run_command.cpp)
target_compile_definitions(dsinfer_test_paths PRIVATE DSINFER_SOURCE_PATH="${CMAKE_SOURCE_DIR}")
target_include_directories(dsinfer_test_paths PUBLIC ${CMAKE_SOURCE_DIR}/tests)

# dsinfer_gtest(NAME <exe> SOURCES <files...> DEPS <targets...> [LABELS <labels...>])
# A GoogleTest executable registered with ctest. Unit tests carry the label "unit" so the
# sanitizer run can select them. Sources name files of the tree as
# std::string(DSINFER_SOURCE_DIR) + "/configs/tiny.json".
function(dsinfer_gtest)
  cmake_parse_arguments(T "" "NAME" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} dsinfer_test_paths GTest::gtest GTest::gtest_main)
  target_compile_definitions(${T_NAME} PRIVATE "DSINFER_SOURCE_DIR=::dsinfer::test_paths::source_dir()")
  target_compile_options(${T_NAME} PRIVATE -include test_paths.h)
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if("unit" IN_LIST T_LABELS)
    add_dependencies(dsinfer_unit_tests ${T_NAME})
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} --gtest_brief=1)
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT 900)
endfunction()
