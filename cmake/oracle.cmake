# The test oracle's models (tests/oracle/README.md): six Qwen3-VL and Qwen3.5
# pairs written by `pinhole synth`, then each file's SHA-256 checked against
# tests/oracle/SHA256SUMS, the list llama.cpp's references were recorded
# with. Run by the build (CMakeLists.txt, target oracle_models):
#
#   cmake -DPINHOLE=path/to/pinhole -DSRC=tests/oracle -DOUT=build/testdata/oracle
#         -DVOCAB_DIR=build/testdata/vocab -DSTAMP=file -P cmake/oracle.cmake
#
# The same bytes on every machine: synth's weights depend only on the seed,
# the tensor and the row (integer arithmetic, one rounding per float
# operation, the scalar quantizers of kernels/quant_ref.c).
cmake_minimum_required(VERSION 3.20)
foreach(v PINHOLE SRC OUT VOCAB_DIR STAMP)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "oracle.cmake: -D${v}=... is required")
  endif()
endforeach()

# The tokenizer: llama.cpp's models/ggml-vocab-qwen2.gguf (the Qwen2
# vocabulary, 151,936 ids), committed as a .tar.xz (1.3 of its 5.9 MB).
file(ARCHIVE_EXTRACT INPUT ${SRC}/vocab/ggml-vocab-qwen2.gguf.tar.xz DESTINATION ${VOCAB_DIR})
set(VOCAB ${VOCAB_DIR}/ggml-vocab-qwen2.gguf)
file(REMOVE ${STAMP})

# synth(FILE FLAGS...): pinhole synth FLAGS, the model named after FILE.
function(synth out)
  get_filename_component(name ${out} NAME)
  get_filename_component(dir ${OUT}/${out} DIRECTORY)
  file(MAKE_DIRECTORY ${dir})
  execute_process(COMMAND ${PINHOLE} synth ${ARGN} --vocab ${VOCAB} --name ${name} -t 2 -o ${OUT}/${out}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
  if(rc)
    message(FATAL_ERROR "pinhole synth ${ARGN} -o ${out} failed (${rc}): ${log}")
  endif()
  set_property(GLOBAL APPEND PROPERTY made ${out}.gguf ${out}-mmproj.gguf)
endfunction()

# The pairs (each also writes FILE-mmproj.gguf): Qwen3-VL F16, Q8_0 (vision
# tower Q8_0 too) and the Q4_K_M mix; Qwen3.5 F16, Q8_0 with an MTP block,
# and the Q4_K_M mix with a Q4_K tied embedding. Qwen3.5's tokenizer is the
# same vocabulary with the qwen35 pre-tokenizer, its chat template Qwen3.5's.
synth(models/tiny-f16 --shape oracle-tiny --type f16 --vision-type f16 --seed 1)
synth(models/mid-q8 --shape oracle-mid --type q8_0 --vision-type q8_0 --seed 2)
synth(models/small-q4k --shape oracle-small --type q4_k_m --vision-type f16 --seed 3)
set(Q35 --arch qwen35 --vocab-pre qwen35 --chat-template ${SRC}/templates/Qwen3.5.jinja --vision-type f16)
synth(qwen35/models/tiny ${Q35} --shape oracle-tiny --type f16 --seed 21)
synth(qwen35/models/q8 ${Q35} --shape oracle-mid --type q8_0 --mtp --seed 22)
synth(qwen35/models/q4k ${Q35} --shape oracle-q4k --type q4_k_m --output-type q4_k --seed 46)

# The check: every file written, the bytes listed. SHA256SUMS.new beside
# the stamp lists what was written, for a change that is meant.
file(STRINGS ${SRC}/SHA256SUMS lines)
foreach(line ${lines})
  if(NOT line MATCHES "^([0-9a-f]+)  (.+)$")
    message(FATAL_ERROR "${SRC}/SHA256SUMS: cannot read the line '${line}'")
  endif()
  set(want_${CMAKE_MATCH_2} ${CMAKE_MATCH_1})
endforeach()
get_property(made GLOBAL PROPERTY made)
set(bad "")
set(now "")
foreach(path ${made})
  file(SHA256 ${OUT}/${path} got)
  string(APPEND now "${got}  ${path}\n")
  if(NOT DEFINED want_${path})
    string(APPEND bad "  ${path}: ${got}, not listed\n")
  elseif(NOT got STREQUAL want_${path})
    string(APPEND bad "  ${path}: ${got}, listed ${want_${path}}\n")
  endif()
endforeach()
get_filename_component(new ${STAMP} DIRECTORY)
set(new ${new}/SHA256SUMS.new)
file(WRITE ${new} "${now}")
if(bad)
  message(FATAL_ERROR "pinhole synth changed: the test oracle's models are not the bytes that llama.cpp's "
    "references were recorded with:\n${bad}"
    "If the change to synth (or to the weight quantizers it uses) is meant, record the references "
    "again as tests/oracle/README.md says and replace tests/oracle/SHA256SUMS with ${new}.")
endif()
file(WRITE ${STAMP} "")
