# Fixture of the e2e tests: the V4 tokenizer from the npm DeepSeek-V3 base, then the tiny model with it.
if(NOT EXISTS "${BASE}")
  message(FATAL_ERROR "the npm DeepSeek-V3 tokenizer base ${BASE} is missing: run scripts/setup.sh")
endif()
execute_process(COMMAND "${DSINFER}" mktokenizer --base "${BASE}" --version v4 --out "${OUT}/tokenizer-v4"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dsinfer mktokenizer failed (${rc})")
endif()
execute_process(COMMAND "${DSINFER}" mkmodel --config "${CONFIG}" --seed 1 --out "${OUT}/tiny"
                        --tokenizer-dir "${OUT}/tokenizer-v4"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dsinfer mkmodel failed (${rc})")
endif()
