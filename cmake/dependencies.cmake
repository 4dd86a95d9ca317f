# Header-only dependencies, found (not vendored): Debian's nlohmann-json3-dev and libcli11-dev
# (scripts/setup.sh installs them). On a machine without a package manager (the GPU machine has no
# network) the headers can be pointed to with CMAKE_PREFIX_PATH=<dir> holding include/nlohmann and
# include/CLI; scripts/carry-deps.sh prepares such a folder.
find_package(nlohmann_json 3.10 QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_path(MLAKIT_NLOHMANN_INCLUDE nlohmann/json.hpp REQUIRED)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE ${MLAKIT_NLOHMANN_INCLUDE})
endif()

if(MLAKIT_BUILD_TOOLS)
  find_package(CLI11 2.1 QUIET)
  if(NOT TARGET CLI11::CLI11)
    find_path(MLAKIT_CLI11_INCLUDE CLI/CLI.hpp REQUIRED)
    add_library(CLI11::CLI11 INTERFACE IMPORTED)
    target_include_directories(CLI11::CLI11 INTERFACE ${MLAKIT_CLI11_INCLUDE})
  endif()
endif()
