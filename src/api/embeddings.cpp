// OpenAI embeddings (POST /v1/embeddings) as a client API: the request becomes an internal
// request of task `embed` (llm/embeddings.hpp); the answer is OpenAI's list as the upstream
// adapter wrote it. Never streamed.
#include "api/openai.hpp"
#include "llm/embeddings.hpp"

namespace sluice::api {

namespace {

class Embeddings final : public OpenAiCodec {
 public:
  std::string_view name() const override { return "embeddings"; }

  llm::ParseResult decode(std::string_view body, Op, const config::Config& cfg) const override {
    return llm::parse_embeddings_request(body, cfg);
  }

  std::string answer(llm::Completion& done, const llm::ChatRequest&, std::string_view) const override {
    return std::move(done.body);
  }

  std::unique_ptr<llm::StreamTranslator> stream(std::unique_ptr<llm::StreamTranslator> chunks,
                                                const llm::ChatRequest&, std::string_view) const override {
    return chunks;  // (an embeddings request never streams)
  }
};

}  // namespace

const Codec& openai_embeddings() noexcept {
  static const Embeddings codec;
  return codec;
}

}  // namespace sluice::api
