#pragma once
// Stored responses of the Responses API: what `store` keeps and `previous_response_id`
// continues, by tenant. A response of one tenant is never seen by another.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::api {

struct StoredResponse {
  std::string response;     // the Response object (JSON), as GET /v1/responses/{id} answers it
  std::string messages;     // the conversation in chat form (JSON array): the inputs so far and this answer
  std::string input_items;  // this request's input items (JSON array), for .../input_items
  std::size_t bytes() const noexcept { return response.size() + messages.size() + input_items.size() + 128; }
};

class ConversationStore {
 public:
  virtual ~ConversationStore() = default;
  virtual std::optional<StoredResponse> get(std::string_view tenant, std::string_view id) = 0;
  virtual void put(std::string_view tenant, std::string_view id, StoredResponse r) = 0;
  virtual bool erase(std::string_view tenant, std::string_view id) = 0;
  virtual std::size_t size() const = 0;  // responses held
};

// In this process, shared by the workers: each for `ttl`, the least recently stored
// dropped first beyond `max_bytes` (0: nothing is kept).
std::unique_ptr<ConversationStore> make_memory_store(std::chrono::milliseconds ttl, std::size_t max_bytes);

}  // namespace sluice::api
