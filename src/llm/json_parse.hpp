#pragma once
// Internal to src/llm and the client APIs (src/api): how Boost.JSON documents from outside (client bodies, upstream
// answers, tool arguments) are parsed. Boost.JSON reads a number beyond double's range
// (1e400) as infinity and writes it back as `Infinity`, which is not JSON: relayed, it
// breaks the client or upstream that reads it. Such a document is refused like a
// malformed one (error::exponent_overflow). Found by tests/fuzz (fuzz_chat_request).
#include <boost/json/error.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <cmath>
#include <string_view>

namespace sluice::llm::detail {

inline bool all_finite(const boost::json::value& v) {  // depth bounded by the parser's max_depth
  switch (v.kind()) {
    case boost::json::kind::double_: return std::isfinite(v.get_double());
    case boost::json::kind::array:
      for (const auto& e : v.get_array()) {
        if (!all_finite(e)) return false;
      }
      return true;
    case boost::json::kind::object:
      for (const auto& kv : v.get_object()) {
        if (!all_finite(kv.value())) return false;
      }
      return true;
    default: return true;
  }
}

inline boost::json::value parse_json(std::string_view text, boost::system::error_code& ec,
                                     boost::json::storage_ptr sp = {}, const boost::json::parse_options& opt = {}) {
  boost::json::value v = boost::json::parse(text, ec, sp, opt);
  if (!ec && !all_finite(v)) {
    ec = boost::json::error::exponent_overflow;
    return boost::json::value(nullptr, std::move(sp));
  }
  return v;
}

// A tool call's arguments (a JSON string) as the object a tool_use block's input is. Not
// valid JSON, or not an object: {} (the call still reaches the client, named).
inline boost::json::value arguments_object(const boost::json::value* args) {
  if (args && args->is_string()) {
    boost::system::error_code ec;
    boost::json::value v = parse_json(args->get_string(), ec);
    if (!ec && v.is_object()) return v;
  }
  return boost::json::object{};
}

}  // namespace sluice::llm::detail
