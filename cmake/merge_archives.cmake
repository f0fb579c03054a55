# Merges static archives into one (script mode): cmake -DAR=ar -DOUT=libtlr.a -DPARTS="a.a;b.a" -P
# merge_archives.cmake. OUT's own members come first. GNU ar's MRI script (binutils, also the
# cross toolchains' ar) keeps members of the same name from different archives apart.
set(script "CREATE ${OUT}.merged\nADDLIB ${OUT}\n")
foreach(part IN LISTS PARTS)
  string(APPEND script "ADDLIB ${part}\n")
endforeach()
string(APPEND script "SAVE\nEND\n")
file(WRITE ${OUT}.mri "${script}")
execute_process(COMMAND ${AR} -M INPUT_FILE ${OUT}.mri RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "merging ${OUT} failed: ${err}")
endif()
file(RENAME ${OUT}.merged ${OUT})
file(REMOVE ${OUT}.mri)
