# dtrain_layer(NAME LEVEL n DEPS a b ... LIBS x y ...)
#
# Builds src/dtrain/NAME/*.cc into the static library dtrain_NAME and enforces the layering of
# docs/ARCHITECTURE.md at compile time: the library's sources see an include tree that holds only
# dtrain/NAME and dtrain/<dep> for the listed dependencies (symbolic links in the build folder), so
# `#include "dtrain/nn/layer.h"` from tensor/ fails with "No such file", not at review time.
# Consumers of the library see the same view (PUBLIC), which is exactly what they may use anyway.
# Installed (cmake/DtrainInstall.cmake), a layer is the target dtrain::NAME and its consumers see
# the whole installed include/ tree instead; every layer is recorded in the global property
# DTRAIN_LAYERS for that.
set(DTRAIN_SOURCE_ROOT ${CMAKE_CURRENT_LIST_DIR}/../src)
include(GNUInstallDirs)

function(dtrain_layer name)
  cmake_parse_arguments(ARG "" "LEVEL" "DEPS;LIBS" ${ARGN})
  set(view ${CMAKE_BINARY_DIR}/layer_views/${name})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view}/dtrain)
  foreach(folder ${name} ${ARG_DEPS})
    file(CREATE_LINK ${DTRAIN_SOURCE_ROOT}/dtrain/${folder} ${view}/dtrain/${folder} SYMBOLIC)
  endforeach()
  # Sub-folders belong to their folder's library (comm/transport/inproc/ is part of dtrain_comm).
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${DTRAIN_SOURCE_ROOT}/dtrain/${name}/*.cc)
  set(dep_targets "")
  foreach(dep ${ARG_DEPS})
    list(APPEND dep_targets dtrain_${dep})
  endforeach()
  if(sources)
    add_library(dtrain_${name} STATIC ${sources})
    target_include_directories(dtrain_${name} PUBLIC $<BUILD_INTERFACE:${view}>
                                                     $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_compile_options(dtrain_${name} PRIVATE ${DTRAIN_WARNINGS} ${DTRAIN_OPT_FLAGS})
    target_link_libraries(dtrain_${name} PUBLIC ${dep_targets} ${ARG_LIBS})
  else()
    # A header-only folder.
    add_library(dtrain_${name} INTERFACE)
    target_include_directories(dtrain_${name} INTERFACE $<BUILD_INTERFACE:${view}>
                                                        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(dtrain_${name} INTERFACE ${dep_targets} ${ARG_LIBS})
  endif()
  set_target_properties(dtrain_${name} PROPERTIES EXPORT_NAME ${name})
  set_property(GLOBAL APPEND PROPERTY DTRAIN_LAYERS ${name})
endfunction()
