// A sequence handed from one model instance to another (as from a prefill process to a decode process:
// nothing shared but the exported bytes) decodes bitwise as if it had never moved, from any position.
#include "disagg/sequence_handoff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "../model/deepseek_v4/test_models.h"
#include "core/error.h"

namespace dsinfer::disagg {
namespace {

namespace v4 = model::deepseek_v4;
using v4::testing::make_test_model;
using v4::testing::random_tokens;
using v4::testing::tiny_config;

constexpr int64_t kVocab = 512;
constexpr int64_t kDecode = 40;

class SequenceHandoff : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = make_test_model("tiny512", tiny_config(kVocab));
    v4::ModelOptions opt;
    opt.threads = 2;
    prefill_ = v4::Model::load(dir, opt).release();
    decode_ = v4::Model::load(dir, opt).release();
  }
  static void TearDownTestSuite() {
    delete prefill_;
    delete decode_;
  }
  static inline v4::Model* prefill_ = nullptr;
  static inline v4::Model* decode_ = nullptr;
};

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The prompt through `model`, with the MTP rows of every prompt position but the last (as a prefill
// worker with speculation on leaves them); returns the last row's logits and hidden state.
v4::SequenceOutput prefill(v4::Model& model, v4::SequenceState& st, const std::vector<int32_t>& prompt) {
  std::vector<v4::SequenceOutput> out(1);
  v4::SequenceInput in;
  in.state = &st;
  in.tokens = prompt;
  in.logits = v4::LogitRows::kLast;
  in.want_hidden = true;
  model.forward({&in, 1}, out);
  const size_t hc = out[0].hidden.size() / prompt.size();
  if (prompt.size() > 1) {
    std::vector<v4::SequenceOutput> mtp(1);
    v4::MtpInput m;
    m.state = &st;
    m.hidden = std::span<const float>(out[0].hidden.data(), hc * (prompt.size() - 1));
    m.tokens = std::span<const int32_t>(prompt.data() + 1, prompt.size() - 1);
    model.mtp_forward({&m, 1}, mtp);
  }
  v4::SequenceOutput last;
  last.logits = out[0].logits;
  last.hidden.assign(out[0].hidden.end() - static_cast<std::ptrdiff_t>(hc), out[0].hidden.end());
  return last;
}

// Greedy decode from `first` on; every step's main logits and the MTP logits of the row that pairs the
// previous position's hidden state with the new token (what a draft would start from).
std::vector<float> decode(v4::Model& model, v4::SequenceState& st, int32_t first, std::vector<float> hidden) {
  std::vector<float> trace;
  int32_t token = first;
  for (int64_t i = 0; i < kDecode; ++i) {
    std::vector<v4::SequenceOutput> mtp(1);
    v4::MtpInput m;
    m.state = &st;
    m.hidden = hidden;
    m.tokens = std::span<const int32_t>(&token, 1);
    model.mtp_forward({&m, 1}, mtp);
    trace.insert(trace.end(), mtp[0].logits.begin(), mtp[0].logits.end());
    std::vector<v4::SequenceOutput> out(1);
    v4::SequenceInput in;
    in.state = &st;
    in.tokens = std::span<const int32_t>(&token, 1);
    in.logits = v4::LogitRows::kLast;
    in.want_hidden = true;
    model.forward({&in, 1}, out);
    trace.insert(trace.end(), out[0].logits.begin(), out[0].logits.end());
    hidden = out[0].hidden;
    token = argmax(out[0].logits);
  }
  return trace;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(SequenceHandoff, DecodesBitwiseAsWithoutHandoffAtAnyPosition) {
  // Inside the first block, at a block boundary, unaligned past one, and one short of the next boundary:
  // the decode runs across 128 and 256.
  for (int64_t at : {int64_t{37}, int64_t{128}, int64_t{200}, int64_t{255}}) {
    const auto prompt = random_tokens(at, kVocab, static_cast<uint32_t>(at));
    // Without handoff: one instance all along.
    auto ref = prefill_->new_sequence();
    const auto ref_last = prefill(*prefill_, *ref, prompt);
    const int32_t first = argmax(ref_last.logits);
    const auto expected = decode(*prefill_, *ref, first, ref_last.hidden);

    // With handoff: prefill on one instance, bytes only, decode on the other.
    auto p = prefill_->new_sequence();
    const auto p_last = prefill(*prefill_, *p, prompt);
    ASSERT_TRUE(bitwise_equal(p_last.logits, ref_last.logits));
    const std::vector<uint8_t> bytes = export_sequence(*p, p_last.hidden);
    p.reset();  // the prefill side lets go: nothing of it is used below
    ImportedSequence d = import_sequence(*decode_, bytes);
    ASSERT_EQ(d.state->length(), at);
    ASSERT_EQ(d.state->mtp_length(), at - 1);
    const auto got = decode(*decode_, *d.state, first, d.last_hidden);
    EXPECT_TRUE(bitwise_equal(got, expected)) << "handoff at " << at;
  }
}

TEST_F(SequenceHandoff, WithoutHiddenStateAndWithoutMtpRows) {
  const auto prompt = random_tokens(150, kVocab, 3);
  auto p = prefill_->new_sequence();
  std::vector<v4::SequenceOutput> out(1);
  v4::SequenceInput in;
  in.state = p.get();
  in.tokens = prompt;
  prefill_->forward({&in, 1}, out);
  ImportedSequence d = import_sequence(*decode_, export_sequence(*p));
  EXPECT_TRUE(d.last_hidden.empty());
  EXPECT_EQ(d.state->mtp_length(), 0);
  // The next token's logits on both sides.
  const int32_t next = 5;
  in.tokens = std::span<const int32_t>(&next, 1);
  prefill_->forward({&in, 1}, out);
  std::vector<v4::SequenceOutput> out_d(1);
  v4::SequenceInput in_d = in;
  in_d.state = d.state.get();
  decode_->forward({&in_d, 1}, out_d);
  EXPECT_TRUE(bitwise_equal(out[0].logits, out_d[0].logits));
}

TEST_F(SequenceHandoff, DamagedBytesAreRejected) {
  const auto prompt = random_tokens(140, kVocab, 4);
  auto p = prefill_->new_sequence();
  const auto last = prefill(*prefill_, *p, prompt);
  const auto good = export_sequence(*p, last.hidden);
  EXPECT_NO_THROW(import_sequence(*decode_, good));
  auto rejected = [&](std::vector<uint8_t> bad) {
    try {
      import_sequence(*decode_, bad);
    } catch (const core::Error& e) {
      return e.kind() == core::ErrorKind::kInvalidInput;
    }
    return false;
  };
  auto flipped = good;
  flipped[0] ^= 1;
  EXPECT_TRUE(rejected(flipped));  // magic
  flipped = good;
  flipped[16] = 2;  // 2 blocks for a length of 140
  EXPECT_TRUE(rejected(flipped));
  flipped = good;
  flipped[40] ^= 0x10;  // inside block 0's frame: its checksum fails
  EXPECT_TRUE(rejected(flipped));
  auto shorter = good;
  shorter.resize(good.size() - 4);
  EXPECT_TRUE(rejected(shorter));
  auto longer = good;
  longer.push_back(0);
  EXPECT_TRUE(rejected(longer));
}

}  // namespace
}  // namespace dsinfer::disagg
