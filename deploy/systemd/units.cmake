# Writes the systemd units for an install prefix: @PX_BINDIR@ (ExecStart),
# @PX_DOCDIR@ (Documentation=file:) and @PX_MANDIR@ (Documentation=man:, the
# installed page by its path, so that `systemctl help` and `systemd-analyze
# verify` find it whatever the prefix, with no MANPATH) become
# PX_UNIT_PREFIX's bin, doc and man directories. deploy/CMakeLists.txt runs it twice: at configure time for
# the build tree's copies (CMAKE_INSTALL_PREFIX; the test deploy_units) and
# at install time, where `cmake --install --prefix DIR` has set the prefix
# only then (so the installed units name DIR/bin, not the configured one).
#
# In: PX_UNIT_SRC (deploy/systemd), PX_UNIT_OUT (where to write),
# PX_UNIT_PREFIX, PX_UNIT_BINDIR, PX_UNIT_DOCDIR, PX_UNIT_MANDIR (relative to the prefix,
# or absolute as GNUInstallDirs allows); at install time also
# PX_UNIT_INSTALL, the unit directory relative to the prefix: the units are
# then written to a directory of PX_UNIT_OUT named after the destination
# (installs to other prefixes may run at the same time, as the tests do),
# installed from there (DESTDIR honoured, listed in install_manifest.txt)
# and the directory removed.
foreach(var PX_UNIT_SRC PX_UNIT_OUT PX_UNIT_PREFIX PX_UNIT_BINDIR PX_UNIT_DOCDIR PX_UNIT_MANDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "deploy/systemd/units.cmake: ${var} is not set")
  endif()
endforeach()
foreach(dir BINDIR DOCDIR MANDIR INSTALL)
  if(NOT DEFINED PX_UNIT_${dir} OR IS_ABSOLUTE "${PX_UNIT_${dir}}")
    set(PX_${dir} "${PX_UNIT_${dir}}")
  else()
    set(PX_${dir} "${PX_UNIT_PREFIX}/${PX_UNIT_${dir}}")
  endif()
endforeach()
set(px_units_out "${PX_UNIT_OUT}")
if(DEFINED PX_UNIT_INSTALL)
  string(SHA1 px_units_tag "$ENV{DESTDIR}${PX_INSTALL}")
  set(px_units_out "${PX_UNIT_OUT}/units-${px_units_tag}")
endif()
set(px_units)
foreach(unit pxcoordd.service pxagent.service)
  configure_file("${PX_UNIT_SRC}/${unit}.in" "${px_units_out}/${unit}" @ONLY)
  list(APPEND px_units "${px_units_out}/${unit}")
endforeach()
if(DEFINED PX_UNIT_INSTALL)
  file(INSTALL DESTINATION "${PX_INSTALL}" TYPE FILE FILES ${px_units})
  file(REMOVE_RECURSE "${px_units_out}")
endif()
