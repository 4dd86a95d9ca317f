# NCCL, for the context-parallel merges over the caller's communicator (include/mlakit/cp_nccl.h,
# src/comm/, the library mlakit_nccl) and `mlakit bench --cp N`. Optional: the core library never
# depends on it.
#
# MLAKIT_NCCL: AUTO (the default: with CUDA, when NCCL is found), ON (required) or OFF.
# Where it is looked for, in order: MLAKIT_NCCL_ROOT (a CMake variable, else the environment
# variable of that name, NCCL_ROOT or NCCL_HOME), the CUDA toolkit and the system paths, then the
# nvidia-nccl wheel of MLAKIT_NCCL_PYTHON (python3 on PATH; PyTorch's copy:
# site-packages/nvidia/nccl/{include,lib}, whose library is libnccl.so.2 alone). Programs linked
# with it find it at run time by their build-tree RPATH. Sets MLAKIT_HAVE_NCCL,
# MLAKIT_NCCL_INCLUDE_DIR, MLAKIT_NCCL_LIBRARY.
set(MLAKIT_NCCL AUTO CACHE STRING "Build the NCCL merges (mlakit_nccl): ON, OFF or AUTO (when found)")
set_property(CACHE MLAKIT_NCCL PROPERTY STRINGS AUTO ON OFF)
set(MLAKIT_NCCL_ROOT "" CACHE PATH "NCCL's folder (include/nccl.h, lib/libnccl.so*), when not found")
set(MLAKIT_NCCL_PYTHON python3 CACHE STRING "The Python whose nvidia-nccl wheel is looked in last")

set(MLAKIT_HAVE_NCCL OFF)
if(MLAKIT_NCCL STREQUAL "AUTO" OR MLAKIT_NCCL)
  if(NOT MLAKIT_HAVE_CUDA)
    if(NOT MLAKIT_NCCL STREQUAL "AUTO")
      message(FATAL_ERROR "MLAKIT_NCCL=ON needs a CUDA build (MLAKIT_CUDA)")
    endif()
  else()
    set(roots)
    foreach(root "${MLAKIT_NCCL_ROOT}" "$ENV{MLAKIT_NCCL_ROOT}" "$ENV{NCCL_ROOT}" "$ENV{NCCL_HOME}")
      if(root)
        list(APPEND roots "${root}")
      endif()
    endforeach()
    list(APPEND roots ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_LIBRARY_DIR}/..)
    find_path(MLAKIT_NCCL_INCLUDE_DIR nccl.h HINTS ${roots} ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include)
    # The library next to the header first (a header and a library of two NCCLs would not
    # agree); NAMES_PER_DIR: a folder's libnccl.so.2 before another folder's libnccl.so.
    if(MLAKIT_NCCL_INCLUDE_DIR)
      get_filename_component(header_root "${MLAKIT_NCCL_INCLUDE_DIR}" DIRECTORY)
    endif()
    find_library(MLAKIT_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
                 HINTS ${header_root} ${roots} PATH_SUFFIXES lib lib64)
    if(NOT MLAKIT_NCCL_INCLUDE_DIR OR NOT MLAKIT_NCCL_LIBRARY)
      # PyTorch's copy. nvidia.nccl is a namespace package: its folder is in __path__.
      execute_process(
        COMMAND "${MLAKIT_NCCL_PYTHON}" -c
                "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
        OUTPUT_VARIABLE wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
      if(rc EQUAL 0 AND wheel)
        unset(MLAKIT_NCCL_INCLUDE_DIR CACHE)
        unset(MLAKIT_NCCL_LIBRARY CACHE)
        find_path(MLAKIT_NCCL_INCLUDE_DIR nccl.h PATHS "${wheel}/include" NO_DEFAULT_PATH)
        find_library(MLAKIT_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
                     PATHS "${wheel}/lib" NO_DEFAULT_PATH)
      endif()
    endif()
    if(MLAKIT_NCCL_INCLUDE_DIR AND MLAKIT_NCCL_LIBRARY)
      file(STRINGS "${MLAKIT_NCCL_INCLUDE_DIR}/nccl.h" version_lines
           REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
      set(MLAKIT_NCCL_VERSION "")
      foreach(part MAJOR MINOR PATCH)
        string(REGEX MATCH "NCCL_${part} +([0-9]+)" unused "${version_lines}")
        list(APPEND MLAKIT_NCCL_VERSION "${CMAKE_MATCH_1}")
      endforeach()
      string(JOIN "." MLAKIT_NCCL_VERSION ${MLAKIT_NCCL_VERSION})
      # 2.9: collectives and send/recv captured in CUDA graphs.
      if(MLAKIT_NCCL_VERSION VERSION_LESS 2.9)
        set(why "NCCL ${MLAKIT_NCCL_VERSION} at ${MLAKIT_NCCL_INCLUDE_DIR} is older than 2.9")
      else()
        set(MLAKIT_HAVE_NCCL ON)
        message(STATUS "mlakit: NCCL ${MLAKIT_NCCL_VERSION}: ${MLAKIT_NCCL_LIBRARY}")
      endif()
    else()
      set(why "nccl.h or libnccl not found (set MLAKIT_NCCL_ROOT)")
    endif()
    if(NOT MLAKIT_HAVE_NCCL)
      if(MLAKIT_NCCL STREQUAL "AUTO")
        message(STATUS "mlakit: ${why}: building without the NCCL merges")
      else()
        message(FATAL_ERROR "MLAKIT_NCCL=ON: ${why}")
      endif()
    endif()
  endif()
endif()
