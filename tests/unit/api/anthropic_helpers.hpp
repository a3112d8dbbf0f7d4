#pragma once
// Helpers shared by the Anthropic translation tests.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/messages.hpp"

namespace sluice::api::testing {

namespace json = boost::json;

// A Messages request converted to the chat body (a test failure when it is refused).
inline json::object converted(std::string_view body) {
  auto r = anthropic_to_chat(body);
  if (auto* e = std::get_if<RequestError>(&r)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return json::parse(std::get<std::string>(r)).as_object();
}

// The error of a Messages request that must be refused.
inline RequestError refused(std::string_view body) {
  auto r = anthropic_to_chat(body);
  EXPECT_TRUE(std::holds_alternative<RequestError>(r)) << body;
  return std::holds_alternative<RequestError>(r) ? std::get<RequestError>(r) : RequestError{};
}

// "event: T\ndata: D\n\n" -> (T, D) pairs; fails on anything else.
inline std::vector<std::pair<std::string, json::object>> events(std::string_view out) {
  std::vector<std::pair<std::string, json::object>> v;
  while (!out.empty()) {
    const auto nl = out.find('\n');
    const auto end = out.find("\n\n");
    if (!out.starts_with("event: ") || nl == std::string_view::npos || end == std::string_view::npos ||
        !out.substr(nl + 1).starts_with("data: ")) {
      ADD_FAILURE() << "not an SSE event: " << out;
      break;
    }
    v.emplace_back(std::string(out.substr(7, nl - 7)), json::parse(out.substr(nl + 7, end - nl - 7)).as_object());
    out.remove_prefix(end + 2);
  }
  return v;
}

}  // namespace sluice::api::testing
