# Finds oneDNN (Debian: libdnnl-dev) without its own CMake package.
#
# Debian's dnnl-config.cmake calls find_package(OpenCL) and fails when the
# OpenCL headers are absent (they are only a Recommends of libdnnl-dev), yet
# libinfer uses oneDNN's CPU engine alone. So we look for the header and the
# library directly and define the imported target DNNL::dnnl ourselves.
find_path(ONEDNN_INCLUDE_DIR NAMES dnnl.hpp oneapi/dnnl/dnnl.hpp)
find_library(ONEDNN_LIBRARY NAMES dnnl)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN
  REQUIRED_VARS ONEDNN_LIBRARY ONEDNN_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "install Debian's libdnnl-dev (scripts/deps.sh does)")
if(OneDNN_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION "${ONEDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ONEDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(ONEDNN_INCLUDE_DIR ONEDNN_LIBRARY)
