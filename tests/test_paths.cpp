#include "test_paths.h"

namespace dsinfer::test_paths {

const char* source_dir() { return DSINFER_SOURCE_PATH; }

}  // namespace dsinfer::test_paths
