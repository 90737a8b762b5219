# `cmake --install build [--prefix P]`: the three programs and the launcher in bin/, the cluster
# presets where the programs look for them (share/graphpipe/clusters, see cost-model cluster.cc),
# man pages made from each program's --help, bash completion, and the docs.
include(GNUInstallDirs)
set(GP_PROGRAMS graphpipe-plan graphpipe-executor graphpipe-profile)
install(TARGETS ${GP_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS scripts/graphpipe-launch DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY configs/clusters DESTINATION ${CMAKE_INSTALL_DATADIR}/graphpipe
        FILES_MATCHING PATTERN "*.pbtxt")
# bash-completion loads a command's completion from a file named after it.
foreach(prog ${GP_PROGRAMS} graphpipe-launch)
  install(FILES scripts/completion/graphpipe.bash
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME ${prog})
endforeach()
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})

find_program(GP_HELP2MAN help2man)
if(GP_HELP2MAN)
  set(pages)
  foreach(prog ${GP_PROGRAMS})
    set(page ${CMAKE_BINARY_DIR}/man/${prog}.1)
    add_custom_command(OUTPUT ${page}
      COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/make-man.sh $<TARGET_FILE:${prog}> ${page}
      DEPENDS ${prog} ${PROJECT_SOURCE_DIR}/scripts/make-man.sh
      COMMENT "man page ${prog}.1 from its --help" VERBATIM)
    list(APPEND pages ${page})
  endforeach()
  add_custom_target(man ALL DEPENDS ${pages})
  install(FILES ${pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "GraphPipe: help2man not found: no man pages (scripts/install-deps.sh installs it)")
endif()
