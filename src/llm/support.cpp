// What each wire can do with each field of a chat request (docs/api.md, "Fields by
// upstream"): OpenAI-compatible upstreams get every field as sent; the Ollama and Anthropic
// adapters translate what has a translation, and a field that would change the answer but
// has none is refused here, naming it, rather than silently dropped. Fields that change
// nothing of the answer (user, metadata, cache keys...) are left out quietly.
#include "llm/support.hpp"

#include <array>

namespace sluice::llm {

namespace json = boost::json;

namespace {

bool set(const json::value* v) { return v && !v->is_null(); }

bool truthy(const json::value* v) { return v && v->is_bool() && v->get_bool(); }

bool more_than_one(const json::value* v) {
  return v && ((v->is_int64() && v->get_int64() > 1) || (v->is_uint64() && v->get_uint64() > 1) ||
               (v->is_double() && v->get_double() > 1));
}

bool non_empty_object(const json::value* v) { return v && v->is_object() && !v->get_object().empty(); }

bool asks_audio(const json::value* v) {
  if (!v || !v->is_array()) return false;
  for (const auto& m : v->get_array()) {
    if (m.is_string() && m.get_string() == "audio") return true;
  }
  return false;
}

// A tool_choice that forces something: "required", a named function, allowed tools.
bool forcing_tool_choice(const json::value* v) {
  if (!v || v->is_null()) return false;
  if (v->is_string()) return v->get_string() == "required";
  return true;
}

// A number other than its default (0 for the penalties, top_logprobs).
bool nonzero(const json::value* v) {
  return v && v->is_number() && v->to_number<double>() != 0;
}

// A tool_choice object only chat's tools API has (allowed_tools, custom).
bool chat_only_tool_choice(const json::value* v) {
  if (!v || !v->is_object()) return false;
  const auto* t = v->get_object().if_contains("type");
  return !(t && t->is_string() && t->get_string() == "function");
}

// Tools other than functions (custom tools).
bool non_function_tools(const json::value* v) {
  if (!v || !v->is_array()) return false;
  for (const auto& t : v->get_array()) {
    const auto* o = t.if_object();
    const auto* type = o ? o->if_contains("type") : nullptr;
    if (!type || !type->is_string() || type->get_string() != "function") return true;
  }
  return false;
}

// functions with a function_call that uses them (none alone changes nothing).
bool uses_functions(const json::object& b) {
  if (set(b.if_contains("functions"))) return true;
  const auto* fc = b.if_contains("function_call");
  return fc && !fc->is_null() && !(fc->is_string() && fc->get_string() == "none");
}

struct Rule {
  std::string_view field;
  bool (*applies)(const json::object& body);  // the field is set in a way the wire cannot honour
  std::string_view why;
};

#define SLUICE_FIELD(name) [](const json::object& b) { return set(b.if_contains(name)); }

// Fields no adapter but the OpenAI-compatible one can honour.
constexpr Rule kNotTranslated[] = {
    {"n", [](const json::object& b) { return more_than_one(b.if_contains("n")); }, "one choice only (n > 1)"},
    {"logprobs", [](const json::object& b) { return truthy(b.if_contains("logprobs")); }, "no log probabilities"},
    {"top_logprobs", [](const json::object& b) { return nonzero(b.if_contains("top_logprobs")); }, "no log probabilities"},
    {"logit_bias", [](const json::object& b) { return non_empty_object(b.if_contains("logit_bias")); }, "no logit bias"},
    {"audio", SLUICE_FIELD("audio"), "no audio output"},
    {"modalities", [](const json::object& b) { return asks_audio(b.if_contains("modalities")); }, "no audio output"},
    {"prediction", SLUICE_FIELD("prediction"), "no predicted outputs"},
    {"web_search_options", SLUICE_FIELD("web_search_options"), "no web search"},
    {"reasoning_effort", SLUICE_FIELD("reasoning_effort"), "no reasoning effort setting"},
    {"verbosity", SLUICE_FIELD("verbosity"), "no verbosity setting"},
    {"moderation", SLUICE_FIELD("moderation"), "no moderation"},
    {"functions", uses_functions, "the deprecated functions API is not translated (use tools)"},
    {"tools", [](const json::object& b) { return non_function_tools(b.if_contains("tools")); }, "function tools only"},
    {"tool_choice", [](const json::object& b) { return chat_only_tool_choice(b.if_contains("tool_choice")); },
     "no allowed_tools or custom tool choice"},
};

// Ollama: sampling, stop, max_tokens, response_format, tools and its own options are
// translated; it has no tool_choice (auto is its behaviour, none leaves the tools out) and
// no way to keep the model to one tool call.
constexpr Rule kOllamaOnly[] = {
    {"tool_choice", [](const json::object& b) { return forcing_tool_choice(b.if_contains("tool_choice")); },
     "no forced tool choice"},
    {"parallel_tool_calls",
     [](const json::object& b) {
       const auto* p = b.if_contains("parallel_tool_calls");
       return p && p->is_bool() && !p->get_bool();
     },
     "no way to keep it to one tool call"},
};

// Anthropic: temperature, top_p, stop, user, max_tokens, tools, tool_choice and
// parallel_tool_calls are translated.
constexpr Rule kAnthropicOnly[] = {
    {"presence_penalty", [](const json::object& b) { return nonzero(b.if_contains("presence_penalty")); },
     "no presence penalty"},
    {"frequency_penalty", [](const json::object& b) { return nonzero(b.if_contains("frequency_penalty")); },
     "no frequency penalty"},
    {"seed", SLUICE_FIELD("seed"), "no seed"},
    {"response_format",
     [](const json::object& b) {
       const auto* rf = b.if_contains("response_format");
       if (!rf || !rf->is_object()) return false;
       const auto* t = rf->get_object().if_contains("type");
       return !(t && t->is_string() && t->get_string() == "text");
     },
     "no JSON output mode"},
};

#undef SLUICE_FIELD

template <std::size_t N>
std::optional<RequestError> first(const Rule (&rules)[N], const json::object& body, std::string_view wire) {
  for (const auto& r : rules) {
    if (r.applies(body)) {
      return RequestError{Reason::option_not_allowed,
                          "'" + std::string(r.field) + "' cannot be honoured by its " + std::string(wire) +
                              " upstream: " + std::string(r.why),
                          std::string(r.field)};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<RequestError> chat_field_unsupported(const ChatRequest& req, config::Provider wire) {
  switch (wire) {
    case config::Provider::openai:
    case config::Provider::simulated: return std::nullopt;
    case config::Provider::ollama:
      if (auto e = first(kNotTranslated, req.body, "Ollama")) return e;
      return first(kOllamaOnly, req.body, "Ollama");
    case config::Provider::anthropic:
      if (auto e = first(kNotTranslated, req.body, "Anthropic")) return e;
      return first(kAnthropicOnly, req.body, "Anthropic");
  }
  return std::nullopt;
}

}  // namespace sluice::llm
