#include "server/api_errors.h"

#include <gtest/gtest.h>

#include <functional>
#include <new>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsinfer::server {
namespace {

using PlainJson = nlohmann::json;  // unordered: comparisons ignore key order

TEST(ApiErrors, OpenAIShape) {
  PlainJson j = PlainJson::parse(error_body(ErrorFlavor::kOpenAI, ApiError{404, "no such model", "model_not_found", "model", {}}));
  EXPECT_EQ(j, PlainJson::parse(R"({"error":{"message":"no such model","type":"invalid_request_error","param":"model",
                                         "code":"model_not_found"}})"));
  j = PlainJson::parse(error_body(ErrorFlavor::kOpenAI, ApiError{429, "slow down", "", "", {}}));
  EXPECT_EQ(j["error"]["type"], "rate_limit_error");
  EXPECT_EQ(j["error"]["code"], "rate_limit_exceeded");
  EXPECT_TRUE(j["error"]["param"].is_null());
}

TEST(ApiErrors, AnthropicShape) {
  PlainJson j = PlainJson::parse(error_body(ErrorFlavor::kAnthropic, ApiError{413, "too big", "", "", {}}));
  EXPECT_EQ(j, PlainJson::parse(R"({"type":"error","error":{"type":"request_too_large","message":"too big"}})"));
  EXPECT_EQ(anthropic_error_type(400), "invalid_request_error");
  EXPECT_EQ(anthropic_error_type(401), "authentication_error");
  EXPECT_EQ(anthropic_error_type(404), "not_found_error");
  EXPECT_EQ(anthropic_error_type(429), "rate_limit_error");
  EXPECT_EQ(anthropic_error_type(500), "api_error");
  EXPECT_EQ(anthropic_error_type(503), "overloaded_error");
}

TEST(ApiErrors, InvalidUtf8InAMessageStillSerialises) {
  std::string body = error_body(ErrorFlavor::kOpenAI, ApiError{400, "bad \xff byte", "", "", {}});
  EXPECT_NO_THROW(PlainJson::parse(body));
}

TEST(ApiErrors, ReshapeTakesTheRecipeMessage) {
  const std::string openai = R"({"error":{"message":"Empty input messages","type":"invalid_request_error","param":null,"code":"invalid_request_error"}})";
  EXPECT_EQ(reshape_openai_error(ErrorFlavor::kOpenAI, 400, openai), openai);
  PlainJson j = PlainJson::parse(reshape_openai_error(ErrorFlavor::kAnthropic, 400, openai));
  EXPECT_EQ(j, PlainJson::parse(R"({"type":"error","error":{"type":"invalid_request_error","message":"Empty input messages"}})"));
}

TEST(ApiErrors, FlavorByPath) {
  EXPECT_EQ(flavor_for_path("/v1/messages"), ErrorFlavor::kAnthropic);
  EXPECT_EQ(flavor_for_path("/v1/chat/completions"), ErrorFlavor::kOpenAI);
  EXPECT_EQ(flavor_for_path(""), ErrorFlavor::kOpenAI);
}

// Only the input's own errors reach the client with their text; anything else is a 500 that names an
// incident id (also written to the log) and nothing of the exception.
TEST(ApiErrors, ExceptionsMapByKindAndInternalTextNeverLeaks) {
  const std::string incident = new_incident_id();
  ApiError e = api_error_for_exception(core::Error("messages[0].content must be a string"), incident);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message, "messages[0].content must be a string");
  EXPECT_FALSE(is_internal_exception(core::Error("x")));

  e = api_error_for_exception(core::Error("logprobs are not implemented", core::ErrorKind::kUnsupported), incident);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message, "logprobs are not implemented");
  EXPECT_EQ(PlainJson::parse(error_body(ErrorFlavor::kOpenAI, e))["error"]["code"], "unsupported_value");

  const std::string secret = "safetensors /srv/models/v4/model-00007.safetensors: workspace slot 3 overflow";
  const std::vector<std::function<void()>> internal = {
      [&] { throw core::Error(secret, core::ErrorKind::kInternal); },
      [&] { core::fail_internal(secret); },
      [&] { throw std::runtime_error(secret); },
      [&] { throw std::out_of_range(secret); },
      [] { throw std::bad_alloc(); },
  };
  for (size_t i = 0; i < internal.size(); ++i) {
    try {
      internal[i]();
      ADD_FAILURE() << "case " << i << " did not throw";
    } catch (const std::exception& ex) {
      EXPECT_TRUE(is_internal_exception(ex)) << i;
      const ApiError err = api_error_for_exception(ex, incident);
      EXPECT_EQ(err.status, 500) << i;
      EXPECT_NE(err.message.find(incident), std::string::npos) << err.message;
      for (ErrorFlavor flavor : {ErrorFlavor::kOpenAI, ErrorFlavor::kAnthropic}) {
        const std::string body = error_body(flavor, err);
        EXPECT_EQ(body.find("safetensors"), std::string::npos) << body;
        EXPECT_EQ(body.find("/srv/"), std::string::npos) << body;
        EXPECT_EQ(body.find(ex.what()), std::string::npos) << body;
        EXPECT_NE(body.find(incident), std::string::npos) << body;
      }
    }
  }
  EXPECT_EQ(PlainJson::parse(error_body(ErrorFlavor::kOpenAI, api_error_for_exception(std::bad_alloc(), incident)))["error"]["type"],
            "internal_error");
}

TEST(ApiErrors, IncidentIdsAreFreshHex) {
  const std::string a = new_incident_id(), b = new_incident_id();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 20u);
  EXPECT_EQ(a.substr(0, 4), "err_");
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 4), std::string::npos) << a;
}

}  // namespace
}  // namespace dsinfer::server
