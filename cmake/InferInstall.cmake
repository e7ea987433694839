# cmake --install: header, shared + static libraries, the `infer` CMake package
# (find_package(infer) gives infer::infer and infer::infer_static), infer.pc
# and infer-static.pc.
include(CMakePackageConfigHelpers)

# Two export sets: the shared library's needs nothing, the static library's
# needs its dependencies' development files (inferConfig.cmake checks them).
install(TARGETS infer EXPORT inferTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS infer_static EXPORT inferStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/infer/infer.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/infer)

install(EXPORT inferTargets NAMESPACE infer:: FILE inferTargets.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/infer)
install(EXPORT inferStaticTargets NAMESPACE infer:: FILE inferStaticTargets.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/infer)
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/inferConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/inferConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/infer
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/inferConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/inferConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/inferConfigVersion.cmake
  ${CMAKE_CURRENT_SOURCE_DIR}/cmake/FindOneDNN.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/infer)

# A program that links libinfer.a needs the C++ runtime even when it is
# written in C (its linker driver is then cc): say so in the static target's
# link interface, and in infer.pc's Libs.private.
target_link_libraries(infer_static INTERFACE $<INSTALL_INTERFACE:stdc++> $<INSTALL_INTERFACE:m>)
set(INFER_PC_LIBS_PRIVATE "-ldnnl -lpcre2-8 -lutf8proc -lstdc++ -lm -lpthread")
if(INFER_HAVE_CUDA)
  # The CUDA backend is inside libinfer.a; it needs the static CUDA runtime
  # (cuBLAS is opened at run time: not linked).
  set(INFER_PC_LIBS_PRIVATE
    "${INFER_PC_LIBS_PRIVATE} -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()

if(INFER_HAVE_MPI)
  # The MPI communicator (lib/dist/comm_mpi.cpp) is inside libinfer.a: it needs MPI's libraries.
  foreach(_lib IN LISTS MPI_CXX_LIBRARIES)
    string(APPEND INFER_PC_LIBS_PRIVATE " ${_lib}")
  endforeach()
endif()

# infer.pc is relocatable: the prefix is found from where the file is.
file(RELATIVE_PATH INFER_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/infer.pc.in ${CMAKE_CURRENT_BINARY_DIR}/infer.pc @ONLY)
# infer-static.pc: libinfer.a by its full path. pkg-config cannot make one
# package link the shared library normally and the archive with --static (the
# linker, not pkg-config, picks libinfer.so for -linfer), so the archive is a
# package of its own.
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/infer-static.pc.in ${CMAKE_CURRENT_BINARY_DIR}/infer-static.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/infer.pc ${CMAKE_CURRENT_BINARY_DIR}/infer-static.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
