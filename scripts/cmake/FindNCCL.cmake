# Finds NCCL next to the CUDA toolkit and wraps it in the imported target gp::nccl.
include(FindPackageHandleStandardArgs)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
find_library(NCCL_LIBRARY NAMES nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib
             PATH_SUFFIXES lib lib64)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_INCLUDE_DIR NCCL_LIBRARY)
if(NCCL_FOUND AND NOT TARGET gp::nccl)
  add_library(gp::nccl UNKNOWN IMPORTED)
  set_target_properties(gp::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                            INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
