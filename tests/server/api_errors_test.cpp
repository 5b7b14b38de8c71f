#include "server/api_errors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dsinfer::server {
namespace {

using Json = nlohmann::json;

TEST(ApiErrors, OpenAIShape) {
  Json j = Json::parse(error_body(ErrorFlavor::kOpenAI, ApiError{404, "no such model", "model_not_found", "model", {}}));
  EXPECT_EQ(j, Json::parse(R"({"error":{"message":"no such model","type":"invalid_request_error","param":"model",
                                         "code":"model_not_found"}})"));
  j = Json::parse(error_body(ErrorFlavor::kOpenAI, ApiError{429, "slow down", "", "", {}}));
  EXPECT_EQ(j["error"]["type"], "rate_limit_error");
  EXPECT_EQ(j["error"]["code"], "rate_limit_exceeded");
  EXPECT_TRUE(j["error"]["param"].is_null());
}

TEST(ApiErrors, AnthropicShape) {
  Json j = Json::parse(error_body(ErrorFlavor::kAnthropic, ApiError{413, "too big", "", "", {}}));
  EXPECT_EQ(j, Json::parse(R"({"type":"error","error":{"type":"request_too_large","message":"too big"}})"));
  EXPECT_EQ(anthropic_error_type(400), "invalid_request_error");
  EXPECT_EQ(anthropic_error_type(401), "authentication_error");
  EXPECT_EQ(anthropic_error_type(404), "not_found_error");
  EXPECT_EQ(anthropic_error_type(429), "rate_limit_error");
  EXPECT_EQ(anthropic_error_type(500), "api_error");
  EXPECT_EQ(anthropic_error_type(503), "overloaded_error");
}

TEST(ApiErrors, InvalidUtf8InAMessageStillSerialises) {
  std::string body = error_body(ErrorFlavor::kOpenAI, ApiError{400, "bad \xff byte", "", "", {}});
  EXPECT_NO_THROW(Json::parse(body));
}

TEST(ApiErrors, ReshapeTakesTheRecipeMessage) {
  const std::string openai = R"({"error":{"message":"Empty input messages","type":"invalid_request_error","param":null,"code":"invalid_request_error"}})";
  EXPECT_EQ(reshape_openai_error(ErrorFlavor::kOpenAI, 400, openai), openai);
  Json j = Json::parse(reshape_openai_error(ErrorFlavor::kAnthropic, 400, openai));
  EXPECT_EQ(j, Json::parse(R"({"type":"error","error":{"type":"invalid_request_error","message":"Empty input messages"}})"));
}

TEST(ApiErrors, FlavorByPath) {
  EXPECT_EQ(flavor_for_path("/v1/messages"), ErrorFlavor::kAnthropic);
  EXPECT_EQ(flavor_for_path("/v1/chat/completions"), ErrorFlavor::kOpenAI);
  EXPECT_EQ(flavor_for_path(""), ErrorFlavor::kOpenAI);
}

}  // namespace
}  // namespace dsinfer::server
