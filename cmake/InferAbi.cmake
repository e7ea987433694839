# The checked ABI (docs/ABI.md): libabigail compares libinfer.so with the
# committed baseline abi/libinfer.abi. abidw reads the public types from the
# DWARF of the translation units that define the C API, so those few are
# compiled with -g in every build type (the rest of the library is not).
file(GLOB INFER_API_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/lib/api/*.cpp)
set_property(SOURCE ${INFER_API_SOURCES} APPEND PROPERTY COMPILE_OPTIONS -g)

if(INFER_TESTS AND NOT INFER_SANITIZE AND NOT INFER_TSAN AND NOT INFER_FUZZ)
  # An incompatible change fails unless the SONAME's major version moved;
  # abi_check_self_test shows the rules on two tiny libraries. Both skip
  # (77) without abigail-tools. (The release build checks; sanitizer builds
  # would only repeat it.)
  add_test(NAME abi_check COMMAND ${PROJECT_SOURCE_DIR}/tests/abi_check.sh check $<TARGET_FILE:infer>
    ${PROJECT_SOURCE_DIR}/include/infer/infer.h ${PROJECT_SOURCE_DIR}/abi/libinfer.abi)
  add_test(NAME abi_check_self_test COMMAND ${PROJECT_SOURCE_DIR}/tests/abi_check.sh self-test
    ${CMAKE_CURRENT_BINARY_DIR}/abi_self_test)
  set_tests_properties(abi_check abi_check_self_test PROPERTIES SKIP_RETURN_CODE 77 LABELS abi)
endif()
