# The installed package (docs/LIBRARY.md). `cmake --install BUILD --prefix P` puts
#
#   P/lib/libdtrain_<layer>.a                  one static library per layer of docs/ARCHITECTURE.md
#   P/include/dtrain/<layer>/*.h               the public headers, at the include paths the repo uses
#   P/bin/dtrain                               the command
#   P/lib/cmake/dtrain/dtrainConfig.cmake      find_package(dtrain): the dependencies, then
#   P/lib/cmake/dtrain/dtrainConfigVersion.cmake   the exported targets (dtrainTargets.cmake)
#
# so that another project writes find_package(dtrain 0.1 REQUIRED) and links dtrain::dtrain (every
# layer) or a single layer (dtrain::train, dtrain::nn, ...). The layers and their headers are found
# by what the build already globs (dtrain_layer records each layer in DTRAIN_LAYERS; headers by
# pattern): a new source file or folder is installed without an edit here. Include after the layers
# and the command are defined.
include(CMakePackageConfigHelpers)

get_property(dtrain_layers GLOBAL PROPERTY DTRAIN_LAYERS)
set(dtrain_layer_targets "")
foreach(layer ${dtrain_layers})
  list(APPEND dtrain_layer_targets dtrain_${layer})
  # The headers are C++20: a program on one layer (dtrain::nn) compiles as C++20 too.
  target_compile_features(dtrain_${layer} INTERFACE cxx_std_20)
endforeach()

# dtrain::dtrain: every layer.
add_library(dtrain_library INTERFACE)
set_target_properties(dtrain_library PROPERTIES EXPORT_NAME dtrain)
target_link_libraries(dtrain_library INTERFACE ${dtrain_layer_targets})
target_compile_features(dtrain_library INTERFACE cxx_std_20)
add_library(dtrain::dtrain ALIAS dtrain_library)

set(DTRAIN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
install(TARGETS ${dtrain_layer_targets} dtrain_library
        EXPORT dtrainTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS dtrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Every header of every layer; apps/ holds the command's own sources, which are no library.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/dtrain/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtrain
        FILES_MATCHING PATTERN "*.h"
        PATTERN "apps" EXCLUDE)
install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION ${DTRAIN_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/dtrainConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/package/dtrainConfig.cmake
                              INSTALL_DESTINATION ${DTRAIN_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API (docs/LIBRARY.md, "Stability").
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/dtrainConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/dtrainConfig.cmake
              ${CMAKE_BINARY_DIR}/package/dtrainConfigVersion.cmake
        DESTINATION ${DTRAIN_INSTALL_CMAKEDIR})
