#pragma once
// Internal to src/llm: how Boost.JSON documents from outside (client bodies, upstream
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

}  // namespace sluice::llm::detail
