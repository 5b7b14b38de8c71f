// Limits the API layer applies to what a client sends, checked without a model: the key-count pre-pass
// that keeps the ordered JSON parse of a request body linear, and the API keys `dsinfer serve` accepts.
#include <gtest/gtest.h>

#include <string>

#include "recipe/request_reader.h"
#include "server/api_server.h"

namespace dsinfer::server {
namespace {

using recipe::detail::json_object_keys_within;
using recipe::detail::kMaxJsonObjectKeys;

std::string object_with_keys(size_t n) {
  std::string text = "{";
  for (size_t i = 0; i < n; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  return text + "}";
}

TEST(RequestLimits, ObjectKeyCountIsBounded) {
  EXPECT_TRUE(json_object_keys_within(object_with_keys(kMaxJsonObjectKeys)));
  EXPECT_FALSE(json_object_keys_within(object_with_keys(kMaxJsonObjectKeys + 1)));
  // The 1.1 MB body of the report: 100k keys in one object (9.5 s of ordered parse before the check).
  EXPECT_FALSE(json_object_keys_within(object_with_keys(100000)));
}

TEST(RequestLimits, KeysAreCountedPerObjectAtEveryDepth) {
  const std::string wide = object_with_keys(kMaxJsonObjectKeys + 1);
  EXPECT_FALSE(json_object_keys_within(R"({"messages":[{"content":)" + wide + "}]}"));
  // Many objects, each within the limit, are fine however many keys they have together.
  std::string many = "[";
  for (int i = 0; i < 4; ++i) many += (i ? "," : "") + object_with_keys(kMaxJsonObjectKeys);
  EXPECT_TRUE(json_object_keys_within(many + "]"));
  // Elements of an array are not keys.
  std::string array = "[";
  for (size_t i = 0; i < 3 * kMaxJsonObjectKeys; ++i) array += (i ? ",1" : "1");
  EXPECT_TRUE(json_object_keys_within(array + "]"));
  EXPECT_FALSE(json_object_keys_within(object_with_keys(3), 2));
}

TEST(RequestLimits, TextThatIsNotJsonIsLeftToTheParser) {
  EXPECT_TRUE(json_object_keys_within("{\"a\":"));
  EXPECT_TRUE(json_object_keys_within("not json"));
  EXPECT_TRUE(json_object_keys_within(std::string(100000, '[')));
}

TEST(RequestLimits, ApiKeysThatNoClientCouldSendAreRefused) {
  EXPECT_EQ(api_key_problem("sk-123"), "");
  EXPECT_EQ(api_key_problem("a key with inner spaces"), "");
  EXPECT_NE(api_key_problem(""), "");
  EXPECT_NE(api_key_problem(" k "), "");
  EXPECT_NE(api_key_problem("k "), "");
  EXPECT_NE(api_key_problem("\tk"), "");
  EXPECT_NE(api_key_problem("k\r\nX-Evil: 1"), "");
}

}  // namespace
}  // namespace dsinfer::server
