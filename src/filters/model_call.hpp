#pragma once
// A call a filter makes to a model of its own (a guard model's verdict, a prompt's
// embedding for the semantic cache): one POST to a route's first backend, with its API
// key, within a deadline. Not a client's request: no routing, limits or record.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <string>

namespace sluice::config {
struct Backend;
}
namespace sluice::http {
class Client;
}

namespace sluice::filters {

struct ModelReply {
  std::string body;   // a 200's body
  std::string error;  // why there is none ("HTTP 500", "timeout...")
  bool ok() const { return error.empty(); }
};

boost::asio::awaitable<ModelReply> call_model(http::Client& client, const config::Backend& b, std::string target,
                                              std::string body, std::chrono::milliseconds timeout,
                                              std::size_t max_bytes = 1 << 20);

}  // namespace sluice::filters
