#pragma once
// Internal to src/http (includes Asio's SSL): what http::TlsContext holds.
#include <boost/asio/ssl/context.hpp>

#include "http/tls.hpp"

namespace sluice::http {

class TlsContext {
 public:
  boost::asio::ssl::context ctx{boost::asio::ssl::context::tls_server};
  TlsInfo info;
};

}  // namespace sluice::http
