// The shapes OpenAI's client APIs share (api/openai.hpp).
#include "api/openai.hpp"

#include "common/text.hpp"

namespace sluice::api {

std::string OpenAiCodec::error_body(Reason reason, std::string_view message, std::string_view param) const {
  return sluice::error_body(reason, message, param);
}

std::string OpenAiCodec::error_event(Reason reason, std::string_view message) const {
  return llm::error_frame(reason, message);
}

std::string OpenAiCodec::upstream_error(int, std::string chat_error_body) const { return chat_error_body; }

void OpenAiCodec::model(std::string& out, const ModelEntry& m) const {
  out += R"({"id":)";
  append_json_string(out, m.id);
  out += R"(,"object":"model","created":0,"owned_by":)";
  append_json_string(out, m.owned_by);
  out += '}';
}

void OpenAiCodec::model_list(std::string& out, std::span<const ModelEntry> models) const {
  out += R"({"object":"list","data":[)";
  for (std::size_t i = 0; i < models.size(); ++i) {
    if (i) out += ',';
    model(out, models[i]);
  }
  out += "]}";
}

}  // namespace sluice::api
