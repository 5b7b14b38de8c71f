# Fixture of the e2e tests: the V4 tokenizer from the npm DeepSeek-V3 base, then the tiny model with it.
# VERSION (default v4) and NAME (default tiny): the tokenizer version and the model folder, e.g.
# -DVERSION=v41 -DNAME=tiny-v41 with CONFIG=configs/tiny-v41.json for the V4.1 model.
if(NOT VERSION)
  set(VERSION v4)
endif()
if(NOT NAME)
  set(NAME tiny)
endif()
if(NOT EXISTS "${BASE}")
  message(FATAL_ERROR "the npm DeepSeek-V3 tokenizer base ${BASE} is missing: run scripts/setup.sh")
endif()
execute_process(COMMAND "${DSINFER}" mktokenizer --base "${BASE}" --version ${VERSION} --out "${OUT}/tokenizer-${VERSION}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dsinfer mktokenizer failed (${rc})")
endif()
execute_process(COMMAND "${DSINFER}" mkmodel --config "${CONFIG}" --seed 1 --out "${OUT}/${NAME}"
                        --tokenizer-dir "${OUT}/tokenizer-${VERSION}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dsinfer mkmodel failed (${rc})")
endif()
