#pragma once
// Internal to src/http (and its fuzz target, tests/fuzz): the checks the server makes on a
// request head before it reads the body. It names Beast's message type, so it is included
// only by .cpp files that use Beast already, never by a public header.
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>

namespace sluice::http::detail {

// A request head whose framing or Host the server refuses (RFC 9112 §6.3, §3.2): a
// message for the 400, or empty. Beast already refuses some of these forms itself
// (Content-Length before Transfer-Encoding, a repeated chunked); the rest it would
// frame by Content-Length or as empty, which a proxy in front may read differently.
std::string refused_head(const boost::beast::http::request<boost::beast::http::string_body>& m);

}  // namespace sluice::http::detail
