// limits.max_messages: a chat request with more messages than the cap is refused (400
// too_many_messages) before it is admitted or costs a token. Counted on the request in
// chat-completions form, system and developer messages aside, so both dialects count
// alike: an Anthropic `system` is not a message there either, and each `tool_result` block
// is one message, as each tool result is in chat completions.
#include <string>

#include "config/config.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "llm/chat.hpp"

namespace sluice::filters {

namespace {

class MaxMessages final : public Filter {
 public:
  explicit MaxMessages(int max) : max_(max) {}
  std::string_view name() const override { return "max_messages"; }
  unsigned phases() const override { return bit(Phase::request); }

  Next on(Phase, Request& r, void*, Stop& stop) override {
    if (r.kind != Kind::generate) return Next::go;
    const auto* msgs = r.chat.body.if_contains("messages");
    if (!msgs || !msgs->is_array()) return Next::go;  // parse_chat_request refuses those
    std::int64_t n = 0;
    for (const auto& m : msgs->get_array()) {
      const auto* role = m.is_object() ? m.get_object().if_contains("role") : nullptr;
      const bool instructions = role && role->is_string() && (role->get_string() == "system" || role->get_string() == "developer");
      if (!instructions) ++n;
    }
    if (n <= max_) return Next::go;
    stop.reason = Reason::too_many_messages;
    stop.message = "the request has " + std::to_string(n) + " messages; this gateway takes at most " +
                   std::to_string(max_) +
                   (r.api == "messages" ? " (the system prompt aside; each tool_result block counts as one message)"
                                : " (system and developer messages aside)");
    stop.param = "messages";
    return Next::stop;
  }

 private:
  const int max_;
};

}  // namespace

std::unique_ptr<Filter> make_max_messages(const Deps& d) {
  if (d.cfg.max_messages <= 0) return nullptr;
  return std::make_unique<MaxMessages>(d.cfg.max_messages);
}

}  // namespace sluice::filters
