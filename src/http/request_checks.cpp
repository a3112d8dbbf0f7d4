#include "http/request_checks.hpp"

#include <boost/beast/core/string.hpp>
#include <iterator>
#include <string_view>

namespace sluice::http::detail {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

std::string refused_head(const bhttp::request<bhttp::string_body>& m) {
  if (m.version() >= 11) {
    auto hosts = m.equal_range(bhttp::field::host);
    const auto n = std::distance(hosts.first, hosts.second);
    if (n == 0) return "HTTP/1.1 request without a Host header";
    if (n > 1) return "more than one Host header";
  }
  auto te = m.equal_range(bhttp::field::transfer_encoding);
  if (te.first == te.second) return {};
  if (m.version() < 11) return "Transfer-Encoding in an HTTP/1.0 request";
  if (m.find(bhttp::field::content_length) != m.end()) {
    return "a request may not carry both Transfer-Encoding and Content-Length";
  }
  // Exactly one coding in all Transfer-Encoding fields, and it is chunked.
  int codings = 0;
  bool only_chunked = true;
  for (auto it = te.first; it != te.second; ++it) {
    std::string_view v{it->value().data(), it->value().size()};
    while (!v.empty()) {
      const auto comma = v.find(',');
      std::string_view tok = v.substr(0, comma);
      v = comma == std::string_view::npos ? std::string_view{} : v.substr(comma + 1);
      while (!tok.empty() && (tok.front() == ' ' || tok.front() == '\t')) tok.remove_prefix(1);
      while (!tok.empty() && (tok.back() == ' ' || tok.back() == '\t')) tok.remove_suffix(1);
      if (tok.empty()) continue;
      ++codings;
      if (!beast::iequals(tok, "chunked")) only_chunked = false;
    }
  }
  if (codings != 1 || !only_chunked) return "unsupported Transfer-Encoding (only a single 'chunked' is accepted)";
  return {};
}

}  // namespace sluice::http::detail
