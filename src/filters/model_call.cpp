#include "filters/model_call.hpp"

#include <algorithm>

#include "config/backend.hpp"
#include "http/client.hpp"

namespace sluice::filters {

boost::asio::awaitable<ModelReply> call_model(http::Client& client, const config::Backend& b, std::string target,
                                              std::string body, std::chrono::milliseconds timeout, std::size_t max_bytes) {
  using std::chrono::milliseconds;
  const http::Target to{b.tls, b.host, b.port, b.tls_verify, b.ca_file};
  http::ClientRequest req;
  req.target = std::move(target);
  req.body = std::move(body);
  if (!b.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + b.api_key);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [deadline] {
    return std::max(std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()), milliseconds(1));
  };
  ModelReply out;
  auto sent = co_await client.send(to, req, left(), left());
  if (auto* err = std::get_if<http::ClientError>(&sent)) {
    out.error = err->message;
    co_return out;
  }
  auto& resp = *std::get<std::unique_ptr<http::ClientResponse>>(sent);
  auto got = co_await resp.read_all(max_bytes, left());
  if (auto* err = std::get_if<http::ClientError>(&got)) {
    resp.abort();
    out.error = err->message;
  } else if (resp.status() != 200) {
    out.error = "HTTP " + std::to_string(resp.status());
  } else {
    out.body = std::move(std::get<std::string>(got));
  }
  co_return out;
}

}  // namespace sluice::filters
