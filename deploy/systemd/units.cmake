# Writes the systemd units for an install prefix: @PX_BINDIR@ (ExecStart)
# and @PX_DOCDIR@ (Documentation=file:) become PX_UNIT_PREFIX's bin and doc
# directories. deploy/CMakeLists.txt runs it twice: at configure time for
# the build tree's copies (CMAKE_INSTALL_PREFIX; the test deploy_units) and
# at install time, where `cmake --install --prefix DIR` has set the prefix
# only then (so the installed units name DIR/bin, not the configured one).
#
# In: PX_UNIT_SRC (deploy/systemd), PX_UNIT_OUT (where to write),
# PX_UNIT_PREFIX, PX_UNIT_BINDIR, PX_UNIT_DOCDIR (relative to the prefix,
# or absolute as GNUInstallDirs allows).
foreach(var PX_UNIT_SRC PX_UNIT_OUT PX_UNIT_PREFIX PX_UNIT_BINDIR PX_UNIT_DOCDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "deploy/systemd/units.cmake: ${var} is not set")
  endif()
endforeach()
foreach(dir BINDIR DOCDIR)
  if(IS_ABSOLUTE "${PX_UNIT_${dir}}")
    set(PX_${dir} "${PX_UNIT_${dir}}")
  else()
    set(PX_${dir} "${PX_UNIT_PREFIX}/${PX_UNIT_${dir}}")
  endif()
endforeach()
foreach(unit pxcoordd.service pxagent.service)
  configure_file("${PX_UNIT_SRC}/${unit}.in" "${PX_UNIT_OUT}/${unit}" @ONLY)
endforeach()
