// The Engram hash against the known answers of model-v41.md Appendix A (values from the official
// hashing code and numpy, written into the spec; not produced by this code).
#include "model/deepseek_v41/engram_hash.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/deepseek_v41/numpy_random.h"
#include "model/deepseek_v41/token_map.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using u128 = unsigned __int128;

u128 make128(uint64_t hi, uint64_t lo) { return (u128{hi} << 64) | lo; }

// The released Engram constants (§1.1): layers 1 and 14, N 4, H 8, primes from 16 000 000.
EngramConfig released_engram() {
  EngramConfig e;
  e.layer_ids = {1, 14};
  e.num_embeddings = {384006168, 384016682};
  e.max_ngram_size = 4;
  e.vocab_size = 16000000;
  e.n_heads = 8;
  e.head_dim = 256;
  e.pad_token_id = 2;
  e.compressed_vocab_size = 99092;
  return e;
}

TEST(NumpyRandom, SeedSequenceMatchesAppendixA3) {
  EXPECT_EQ(seed_sequence_pool(10007), (std::array<uint32_t, 4>{0xf1a1018d, 0xa7c60c02, 0xfd15d50a, 0x03b81232}));
  EXPECT_EQ(seed_sequence_pool(140098), (std::array<uint32_t, 4>{0x7097f09f, 0xc71373b7, 0x148492af, 0x9681c6c4}));
  EXPECT_EQ(seed_sequence_state(10007), (std::array<uint64_t, 4>{0x77d32a348ad70d07ull, 0x993ed609b84a4fa5ull,
                                                                  0xd5f972dec8698e49ull, 0x7d79ebaebcf148deull}));
  EXPECT_EQ(seed_sequence_state(140098), (std::array<uint64_t, 4>{0xdb5869feeeccf2beull, 0xad465727d9cf3645ull,
                                                                   0x5155d26378b6bab4ull, 0x9f9e49df66ff1c85ull}));
}

TEST(NumpyRandom, Pcg64MatchesAppendixA3) {
  Pcg64 a(10007);
  EXPECT_TRUE(a.state() == make128(0x3b34af7676e8ddd5ull, 0x556a026c98a77d27ull));
  EXPECT_TRUE(a.inc() == make128(0xabf2e5bd90d31c92ull, 0xfaf3d75d79e291bdull));
  EXPECT_EQ(a.next64(), 15187255322829266483ull);
  EXPECT_EQ(a.next64(), 959186003677246517ull);
  Pcg64 b(140098);
  EXPECT_TRUE(b.state() == make128(0x081481950b65ad0cull, 0x830c0440d514199bull));
  EXPECT_TRUE(b.inc() == make128(0xa2aba4c6f16d7569ull, 0x3f3c93becdfe390bull));
  EXPECT_EQ(b.next64(), 13420388419549774097ull);
  EXPECT_EQ(b.next64(), 10208617735032736636ull);
  const uint64_t bound = 46539438283891ull;  // ((2^63 - 1) div 99 092) div 2
  EXPECT_EQ(numpy_integers(10007, bound, 4),
            (std::vector<int64_t>{38316048023122, 2419938046656, 17979836159674, 36993668729195}));
  EXPECT_EQ(numpy_integers(140098, bound, 4),
            (std::vector<int64_t>{33858405369630, 25755403400457, 15460673601360, 41309613242795}));
}

TEST(EngramHash, ReleasedMultipliers) {
  EXPECT_EQ(engram_multipliers(1, 99092, 4),
            (std::vector<uint64_t>{76632096046245ull, 4839876093313ull, 35959672319349ull, 73987337458391ull}));
  EXPECT_EQ(engram_multipliers(14, 99092, 4),
            (std::vector<uint64_t>{67716810739261ull, 51510806800915ull, 30921347202721ull, 82619226485591ull}));
}

TEST(EngramHash, ReleasedRowIdsMatchAppendixA4) {
  const EngramHash hash(released_engram(), 2);
  ASSERT_EQ(hash.columns(), 24);
  EXPECT_EQ(hash.layers()[0].offsets[1], 16000057);
  std::vector<int64_t> rows(24);
  const int64_t pos0[4] = {5, 2, 2, 2};  // history of position 0: cid 5, then pad
  hash.rows(0, pos0, rows.data());
  EXPECT_EQ(rows, (std::vector<int64_t>{5412672,   18319159,  35492627,  60880252,  74962984,  95657733,
                                        98005115,  127351390, 143494632, 151789366, 171410756, 185435171,
                                        207165545, 218031260, 226330336, 247008214, 256353435, 276423911,
                                        295874085, 305599364, 322749888, 348475788, 367405771, 372009279}));
  const int64_t pos3[4] = {99, 42, 17, 5};
  hash.rows(0, pos3, rows.data());
  EXPECT_EQ(rows, (std::vector<int64_t>{8220142,   24076129,  42973604,  50161011,  68969938,  80580362,
                                        102387095, 127047346, 134315424, 158777482, 171327062, 191148003,
                                        202516735, 208212681, 232771379, 244773367, 262123890, 274880322,
                                        301400668, 314663841, 334174001, 347440506, 356839451, 370926383}));
  hash.rows(1, pos3, rows.data());
  EXPECT_EQ(rows, (std::vector<int64_t>{11523440,  21938014,  44040595,  58778561,  66148416,  92452634,
                                        110886980, 120121793, 129203345, 149058177, 163318915, 187032138,
                                        198030182, 216753334, 226652212, 245960357, 262291490, 274029592,
                                        302724075, 317309773, 328133233, 351701537, 367235299, 380902823}));
}

TEST(EngramHash, RejectsIdsOutsideTheCompressedVocabulary) {
  const EngramHash hash(released_engram(), 2);
  std::vector<int64_t> rows(24);
  const int64_t bad[4] = {99092, 2, 2, 2};
  try {
    hash.rows(0, bad, rows.data());
    ADD_FAILURE() << "no error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("99092"), std::string::npos) << e.what();
  }
}

ModelConfig config_with_engram(int64_t compressed) {
  ModelConfig c;
  c.vocab_size = 8;
  EngramConfig e = released_engram();
  e.compressed_vocab_size = compressed;
  c.engram = e;
  return c;
}

TEST(EngramTokenMapSidecar, ParsesAndChecks) {
  const ModelConfig c = config_with_engram(4);
  const EngramTokenMap m =
      parse_engram_token_map(R"({"compressed_vocab_size": 4, "token_map": [0, 1, 2, 1, 3, 0]})", "t.json", c);
  EXPECT_EQ(m.compressed_vocab, 4);
  EXPECT_EQ(m.compressed(4), 3);
  EXPECT_EQ(m.compressed(5), 0);
  auto error = [&](const std::string& text) {
    try {
      parse_engram_token_map(text, "t.json", c);
    } catch (const core::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(R"({"compressed_vocab_size": 5, "token_map": [0, 1, 2, 3, 4]})").find("engram_compressed_vocab_size 4"),
            std::string::npos);
  EXPECT_NE(error(R"({"compressed_vocab_size": 4, "token_map": [0, 2, 1, 3]})").find("order of first appearance"),
            std::string::npos);
  EXPECT_NE(error(R"({"compressed_vocab_size": 4, "token_map": [0, 1, 2, 2]})").find("3 distinct"), std::string::npos);
  EXPECT_NE(error(R"({"compressed_vocab_size": 4, "token_map": [0, 1, 2, 3, 0, 0, 0, 0, 0]})").find("vocab_size 8"),
            std::string::npos);
  EXPECT_NE(error(R"({"token_map": []})").find("expected"), std::string::npos);
  EXPECT_NE(error("[").find("invalid JSON"), std::string::npos);
  EXPECT_NE(error(R"({"compressed_vocab_size": 4, "token_map": [5]})").find("token_map[0] = 5"), std::string::npos);
  try {
    c.engram.has_value() ? load_engram_token_map("/nonexistent_dsinfer_dir", c) : EngramTokenMap{};
    ADD_FAILURE() << "no error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither engram_token_map.json nor tokenizer.json"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v41
