// OpenAI chat completions (POST /v1/chat/completions) as a client API. Its form is the
// internal one: requests are parsed and validated as they are, answers and chunks pass
// through as the upstream adapters wrote them.
#include "api/codec.hpp"
#include "common/text.hpp"

namespace sluice::api {

namespace {

class ChatCompletions final : public Codec {
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

  std::string error_body(Reason reason, std::string_view message, std::string_view param) const override {
    return sluice::error_body(reason, message, param);
  }

  std::string error_event(Reason reason, std::string_view message) const override {
    return llm::error_frame(reason, message);
  }

  std::string upstream_error(int, std::string chat_error_body) const override { return chat_error_body; }

  void model(std::string& out, const ModelEntry& m) const override {
    out += R"({"id":)";
    append_json_string(out, m.id);
    out += R"(,"object":"model","created":0,"owned_by":)";
    append_json_string(out, m.owned_by);
    out += '}';
  }

  void model_list(std::string& out, std::span<const ModelEntry> models) const override {
    out += R"({"object":"list","data":[)";
    for (std::size_t i = 0; i < models.size(); ++i) {
      if (i) out += ',';
      model(out, models[i]);
    }
    out += "]}";
  }
};

}  // namespace

const Codec& openai_chat() noexcept {
  static const ChatCompletions codec;
  return codec;
}

}  // namespace sluice::api
