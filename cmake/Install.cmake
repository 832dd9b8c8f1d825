# `cmake --install BUILD --prefix P` (issue 17 item 4): the CLI, the public headers, the suites and the CMake
# package, laid out so that a moved prefix keeps working:
#   P/bin/pacheck                           the CLI (finds P/share/pacheck/suites from its own path)
#   P/include/pacheck/{kernel_abi.h,cells.hpp,cells_c.h,gtest.hpp}
#   P/lib/libpacheck_cells.so, P/lib/libpacheck_cells_c.so (the C API alone: Python), P/lib/libpacheck_gtest.a
#   P/share/pacheck/suites/*.toml           the built-in suites
#   P/lib/cmake/pacheck/                    pacheckConfig.cmake, pacheckConfigVersion.cmake, the targets,
#                                           pacheckAddTests.cmake (pacheck_add_tests)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PACHECK_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/pacheck)
set(PACHECK_INSTALL_SUITESDIR ${CMAKE_INSTALL_DATADIR}/pacheck/suites)

# pacheck::kernel_abi: the plugin C ABI's include directory, nothing to link.
add_library(pacheck_kernel_abi INTERFACE)
target_include_directories(pacheck_kernel_abi INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                                        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(pacheck_kernel_abi PROPERTIES EXPORT_NAME kernel_abi)
set_target_properties(pacheck PROPERTIES EXPORT_NAME cli)

install(TARGETS pacheck pacheck_kernel_abi pacheck_cells EXPORT pacheckTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT pacheckTargets NAMESPACE pacheck:: DESTINATION ${PACHECK_INSTALL_CMAKEDIR})
set(_pacheck_headers include/pacheck/kernel_abi.h include/pacheck/cells.hpp include/pacheck/cells_c.h)
if(TARGET pacheck_gtest)
  install(TARGETS pacheck_gtest EXPORT pacheckGTestTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT pacheckGTestTargets NAMESPACE pacheck:: DESTINATION ${PACHECK_INSTALL_CMAKEDIR})
  list(APPEND _pacheck_headers include/pacheck/gtest.hpp)
endif()
install(FILES ${_pacheck_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pacheck)
install(DIRECTORY suites/ DESTINATION ${PACHECK_INSTALL_SUITESDIR} FILES_MATCHING PATTERN "*.toml")

file(STRINGS ${PROJECT_SOURCE_DIR}/include/pacheck/kernel_abi.h _abi_line REGEX "^#define PACHECK_ABI_VERSION [0-9]+")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" PACHECK_ABI_VERSION_NUMBER "${_abi_line}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pacheckConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/pacheckConfig.cmake
                              INSTALL_DESTINATION ${PACHECK_INSTALL_CMAKEDIR}
                              PATH_VARS PACHECK_INSTALL_SUITESDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pacheckConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pacheckConfig.cmake ${PROJECT_BINARY_DIR}/pacheckConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/pacheckAddTests.cmake
        DESTINATION ${PACHECK_INSTALL_CMAKEDIR})

# libpacheck_cells_c.so (the C API alone, for Python's ctypes: cells/CMakeLists.txt) beside libpacheck_cells.
install(TARGETS pacheck_cells_c LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The Python wheel (pyproject.toml: scikit-build-core installs only the component `python`, with the package
# folder as the prefix): PKG/bin/pacheck, PKG/lib/libpacheck_cells_c.so and PKG/share/pacheck/suites, where the
# CLI and the library find the suites from their own paths (suites/suite.cpp's suites_dir), as in any prefix.
install(TARGETS pacheck RUNTIME DESTINATION bin COMPONENT python)
install(TARGETS pacheck_cells_c LIBRARY DESTINATION lib COMPONENT python)
install(DIRECTORY suites/ DESTINATION share/pacheck/suites COMPONENT python FILES_MATCHING PATTERN "*.toml")
