#pragma once
// What OpenAI's client APIs (chat completions, embeddings, responses) share: the error body
// and stream error event, upstream errors as they are, the model listings.
#include "api/codec.hpp"

namespace sluice::api {

class OpenAiCodec : public Codec {
 public:
  std::string error_body(Reason reason, std::string_view message, std::string_view param) const override;
  std::string error_event(Reason reason, std::string_view message) const override;
  std::string upstream_error(int status, std::string chat_error_body) const override;
  void model(std::string& out, const ModelEntry& m) const override;
  void model_list(std::string& out, std::span<const ModelEntry> models) const override;
};

}  // namespace sluice::api
