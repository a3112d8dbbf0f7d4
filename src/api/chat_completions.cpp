// OpenAI chat completions (POST /v1/chat/completions) as a client API. Its form is the
// internal one: requests are parsed and validated as they are, answers and chunks pass
// through as the upstream adapters wrote them.
#include "api/openai.hpp"

namespace sluice::api {

namespace {

class ChatCompletions final : public OpenAiCodec {
 public:
  std::string_view name() const override { return "chat.completions"; }

  llm::ParseResult decode(std::string_view body, Op, const config::Config& cfg) const override {
    return llm::parse_chat_request(body, cfg);
  }

  std::string answer(llm::Completion& done, const llm::ChatRequest&, std::string_view) const override {
    return std::move(done.body);
  }

  std::unique_ptr<llm::StreamTranslator> stream(std::unique_ptr<llm::StreamTranslator> chunks,
                                                const llm::ChatRequest&, std::string_view) const override {
    return chunks;
  }
};

}  // namespace

const Codec& openai_chat() noexcept {
  static const ChatCompletions codec;
  return codec;
}

}  // namespace sluice::api
