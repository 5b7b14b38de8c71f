// Where the source tree is, for tests that read its files (configs/, tests/data/, the npm cache).
// dsinfer_gtest() force-includes this header and defines DSINFER_SOURCE_DIR as source_dir(), so test
// sources write std::string(DSINFER_SOURCE_DIR) + "/configs/tiny.json". The path is compiled into
// test_paths.cpp alone: a -D with the path on every test source would change each one's compile
// command whenever the tree is copied elsewhere (scripts/test.sh stages a fresh copy per run), and
// ccache would miss every test source instead of this one file.
#pragma once

namespace dsinfer::test_paths {

const char* source_dir();

}  // namespace dsinfer::test_paths
