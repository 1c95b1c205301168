# cmake -DAR=ar -DOUTPUT=libx.a -DLIST=archives.txt -P merge_archives.cmake
# Writes OUTPUT, one static archive holding every member of the archives LIST names (one per line),
# through an `ar -M` script (GNU and LLVM ar): members are copied, never unpacked to files, so two
# archives may hold members of the same name.
file(STRINGS "${LIST}" archives)
get_filename_component(dir "${OUTPUT}" DIRECTORY)
file(MAKE_DIRECTORY "${dir}")
set(partial "${OUTPUT}.partial")
file(REMOVE "${partial}")
set(script "create ${partial}\n")
foreach (archive IN LISTS archives)
  if (archive)
    string(APPEND script "addlib ${archive}\n")
  endif ()
endforeach ()
string(APPEND script "save\nend\n")
file(WRITE "${OUTPUT}.mri" "${script}")
execute_process(COMMAND "${AR}" -M INPUT_FILE "${OUTPUT}.mri" RESULT_VARIABLE result
                ERROR_VARIABLE error)
if (NOT result EQUAL 0)
  message(FATAL_ERROR "merging archives into ${OUTPUT} failed (${AR} -M): ${error}")
endif ()
file(RENAME "${partial}" "${OUTPUT}")
