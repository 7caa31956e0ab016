# Writes OUT: the SHA-256 and path of each source file the course build's compiled libraries are made from (the
# engine, grader, dashboard and app, and the labs but for their student.cpp), one "HASH  PATH" line each, sorted,
# paths relative to SOURCE_DIR. The course build runs it once those libraries are built (CMakeLists.txt);
# `fsdplab grade --submission` runs it again on the tree as it is then and compares the two, so that a submission
# is never built against headers other than those its libraries were compiled from ([Note: a submission's build]).
# Written to a temporary name and renamed: a stopped run leaves the last record whole.
file(GLOB_RECURSE files LIST_DIRECTORIES false RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/engine/* ${SOURCE_DIR}/grader/*
     ${SOURCE_DIR}/app/* ${SOURCE_DIR}/labs/*)
list(APPEND files CMakeLists.txt)
list(SORT files)
set(rows "")
foreach(file IN LISTS files)
  get_filename_component(name ${file} NAME)
  # Code and build files only (not a lab's README or a held-out case), and no editor's hidden or backup files.
  if(NOT (name MATCHES "\\.(cpp|hpp|h|cu|cuh|cmake|in)$" OR name STREQUAL "CMakeLists.txt") OR name MATCHES "^\\."
     OR file MATCHES "^labs/[^/]+/student\\.cpp$")
    continue()
  endif()
  file(SHA256 ${SOURCE_DIR}/${file} hash)
  string(APPEND rows "${hash}  ${file}\n")
endforeach()
file(WRITE ${OUT}.partial "${rows}")
file(RENAME ${OUT}.partial ${OUT})
