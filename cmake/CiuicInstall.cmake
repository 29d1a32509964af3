# Installs headers, libciuic.so, the CMake package (find_package(ciuic) ->
# ciuic::ciuic) and ciuic.pc for pkg-config.
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ciuic DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(TARGETS ciuic EXPORT ciuicTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ciuicTargets NAMESPACE ciuic:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ciuic)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ciuicConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ciuicConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ciuic)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ciuicConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ciuicConfig.cmake ${PROJECT_BINARY_DIR}/ciuicConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ciuic)

# Relocatable: the prefix is found relative to the .pc file itself.
file(RELATIVE_PATH CIUIC_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/ciuic.pc.in ${PROJECT_BINARY_DIR}/ciuic.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/ciuic.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
