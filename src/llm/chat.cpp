#include "llm/chat.hpp"

#include <ctime>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/serializer.hpp>
#include <boost/json/value.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/text.hpp"
#include "config/config.hpp"
#include "llm/anthropic.hpp"
#include "llm/embeddings.hpp"
#include "llm/json_parse.hpp"

namespace sluice::llm {
namespace json = boost::json;

namespace {

// ---- small output helpers ---------------------------------------------------------

// Appends the JSON serialization of v to out, without an intermediate string.
void append_value(std::string& out, const json::value& v) {
  json::serializer sr;
  sr.reset(&v);
  std::size_t chunk = 256;
  while (!sr.done()) {
    const std::size_t old = out.size();
    out.resize(old + chunk);
    const auto written = sr.read(out.data() + old, chunk);
    out.resize(old + written.size());
    if (chunk < 64 * 1024) chunk *= 2;
  }
}

void append_key(std::string& out, bool& first, std::string_view key) {
  if (!first) out.push_back(',');
  first = false;
  append_json_string(out, key);
  out.push_back(':');
}

// Shortest round-trip text of a double ("0.7", "32768", "1e+300").
std::string format_number(double d) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return ec == std::errc() ? std::string(buf, p) : std::string("?");
}

std::string format_value(const json::value& v) {
  switch (v.kind()) {
    case json::kind::int64: return std::to_string(v.get_int64());
    case json::kind::uint64: return std::to_string(v.get_uint64());
    case json::kind::double_: return format_number(v.get_double());
    default: return json::serialize(v);
  }
}

// ---- validation -------------------------------------------------------------------

RequestError error(Reason r, std::string message, std::string param) {
  return RequestError{r, std::move(message), std::move(param)};
}

bool is_integer(const json::value& v) { return v.is_int64() || v.is_uint64(); }

const char* kind_name(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_: return "a number";
    case json::kind::string: return "a string";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "?";
}

std::optional<RequestError> type_error(std::string_view field, const json::value& v,
                                       std::string_view expected) {
  std::string msg;
  msg.reserve(64);
  msg += "'";
  msg += field;
  msg += "' must be ";
  msg += expected;
  msg += ", got ";
  msg += kind_name(v);
  return error(Reason::invalid_request, std::move(msg), std::string(field));
}

// Checks a numeric value against its configured range. `path` is the field path used in
// the message and as the error's param.
std::optional<RequestError> check_range(std::string_view path, const json::value& v,
                                        const config::Range& range) {
  // The message is built only on failure: this runs for every checked field.
  auto allowed = [&] { return "[" + format_number(range.min) + ", " + format_number(range.max) + "]"; };
  if (range.integer && !is_integer(v)) {
    return error(Reason::option_out_of_range,
                 std::string(path) + "=" + format_value(v) + " is not an integer (allowed: " +
                     "integers in " + allowed() + ")",
                 std::string(path));
  }
  const double d = v.is_int64()    ? static_cast<double>(v.get_int64())
                   : v.is_uint64() ? static_cast<double>(v.get_uint64())
                                   : v.get_double();
  if (!(d >= range.min && d <= range.max)) {
    return error(Reason::option_out_of_range,
                 std::string(path) + "=" + format_value(v) + " is out of range " + allowed(),
                 std::string(path));
  }
  return std::nullopt;
}

enum class Field {
  model, messages, stream, stream_options, number, integer, max_tokens, stop, object,
  boolean, string, array, tool_choice, response_format, options, keep_alive,
  one_of,        // a string from the entry's values
  list_of,       // an array of strings from the entry's values
  function_call, // "none", "auto" or {"name": ...} (deprecated functions API)
};

// The values of the spec's enums (openai-openapi.yaml, CreateChatCompletionRequest).
constexpr std::string_view kReasoningEffort[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
constexpr std::string_view kVerbosity[] = {"low", "medium", "high"};
constexpr std::string_view kModalities[] = {"text", "audio"};
constexpr std::string_view kServiceTier[] = {"auto", "default", "flex", "scale", "priority", "fast"};
constexpr std::string_view kCacheRetention[] = {"in_memory", "24h"};

struct FieldEntry {
  std::string_view name;
  Field f;
  std::span<const std::string_view> values = {};
};

// The known top-level fields of a chat-completions request and how each is checked: every
// field of the spec's CreateChatCompletionRequest, and Ollama's options and keep_alive.
const FieldEntry* known_field(std::string_view k) {
  using Entry = FieldEntry;
  static constexpr Entry kFields[] = {
      {"model", Field::model},
      {"messages", Field::messages},
      {"stream", Field::stream},
      {"stream_options", Field::stream_options},
      {"temperature", Field::number},
      {"top_p", Field::number},
      {"n", Field::integer},
      {"max_tokens", Field::max_tokens},
      {"max_completion_tokens", Field::max_tokens},
      {"stop", Field::stop},
      {"presence_penalty", Field::number},
      {"frequency_penalty", Field::number},
      {"logit_bias", Field::object},
      {"logprobs", Field::boolean},
      {"top_logprobs", Field::integer},
      {"user", Field::string},
      {"seed", Field::integer},
      {"tools", Field::array},
      {"tool_choice", Field::tool_choice},
      {"parallel_tool_calls", Field::boolean},
      {"response_format", Field::response_format},
      {"options", Field::options},
      {"keep_alive", Field::keep_alive},
      {"metadata", Field::object},
      {"store", Field::boolean},
      {"service_tier", Field::one_of, kServiceTier},
      {"reasoning_effort", Field::one_of, kReasoningEffort},
      {"verbosity", Field::one_of, kVerbosity},
      {"modalities", Field::list_of, kModalities},
      {"audio", Field::object},
      {"prediction", Field::object},
      {"web_search_options", Field::object},
      {"safety_identifier", Field::string},
      {"prompt_cache_key", Field::string},
      {"prompt_cache_options", Field::object},
      {"prompt_cache_retention", Field::one_of, kCacheRetention},
      {"moderation", Field::object},
      {"functions", Field::array},
      {"function_call", Field::function_call},
  };
  for (const auto& e : kFields) {
    if (e.name == k) return &e;
  }
  return nullptr;
}

std::string quoted_list(std::span<const std::string_view> values) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    out += i == 0 ? "" : i + 1 == values.size() ? " or " : ", ";
    out += '"';
    out += values[i];
    out += '"';
  }
  return out;
}

bool one_of(const json::value& v, std::span<const std::string_view> values) {
  if (!v.is_string()) return false;
  const std::string_view s = v.get_string();
  return std::find(values.begin(), values.end(), s) != values.end();
}

std::optional<RequestError> check_messages(const json::value& v) {
  if (!v.is_array()) return type_error("messages", v, "a non-empty array of messages");
  const auto& arr = v.get_array();
  if (arr.empty()) {
    return error(Reason::invalid_request, "'messages' must contain at least one message",
                 "messages");
  }
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const std::string path = "messages[" + std::to_string(i) + "]";
    if (!arr[i].is_object()) return type_error(path, arr[i], "an object");
    const auto& m = arr[i].get_object();
    const auto* role = m.if_contains("role");
    if (!role) {
      return error(Reason::invalid_request, "'" + path + ".role' is required",
                   path + ".role");
    }
    static constexpr std::string_view kRoles[] = {"system", "developer", "user", "assistant", "tool", "function"};
    if (!one_of(*role, kRoles)) {
      return error(Reason::invalid_request,
                   "'" + path + ".role' must be one of " + quoted_list(kRoles) +
                       (role->is_string() ? ", got \"" + std::string(role->get_string()) + "\"" : ""),
                   path + ".role");
    }
    const std::string_view r = role->get_string();
    // Every message but the assistant's carries content (the assistant's may be null when
    // it calls tools); a tool message answers a tool call by its id.
    const auto* content = m.if_contains("content");
    if (r != "assistant" && r != "function" && (!content || content->is_null())) {
      return error(Reason::invalid_request, "'" + path + ".content' is required for a " + std::string(r) + " message",
                   path + ".content");
    }
    if (r == "tool") {
      const auto* id = m.if_contains("tool_call_id");
      if (!id || !id->is_string()) {
        return error(Reason::invalid_request, "'" + path + ".tool_call_id' is required for a tool message (a string)",
                     path + ".tool_call_id");
      }
    }
    if (const auto* content = m.if_contains("content")) {
      if (content->is_array()) {
        const auto& parts = content->get_array();
        for (std::size_t j = 0; j < parts.size(); ++j) {
          const auto& part = parts[j];
          const std::string ppath = path + ".content[" + std::to_string(j) + "]";
          if (!part.is_object()) return type_error(ppath, part, "an object");
          const auto* type = part.get_object().if_contains("type");
          if (!type || !type->is_string()) {
            return error(Reason::invalid_request, "'" + ppath + ".type' must be a string",
                         ppath + ".type");
          }
          if (type->get_string() == "text") {
            const auto* text = part.get_object().if_contains("text");
            if (!text || !text->is_string()) {
              return error(Reason::invalid_request,
                           "'" + ppath + ".text' must be a string", ppath + ".text");
            }
          }
        }
      } else if (!content->is_string() && !content->is_null()) {
        return type_error(path + ".content", *content, "a string, an array of parts or null");
      }
    }
  }
  return std::nullopt;
}

std::optional<RequestError> check_field(std::string_view k, const FieldEntry& entry, const json::value& v,
                                        const config::Config& cfg) {
  switch (entry.f) {
    case Field::one_of:
      if (v.is_null() || one_of(v, entry.values)) return std::nullopt;
      return type_error(k, v, "one of " + quoted_list(entry.values));
    case Field::list_of:
      if (v.is_null()) return std::nullopt;
      if (v.is_array()) {
        bool all = true;
        for (const auto& e : v.get_array()) all = all && one_of(e, entry.values);
        if (all) return std::nullopt;
      }
      return type_error(k, v, "an array of " + quoted_list(entry.values));
    case Field::function_call:
      if (v.is_null() || (v.is_string() && (v.get_string() == "none" || v.get_string() == "auto"))) return std::nullopt;
      if (v.is_object()) {
        const auto* name = v.get_object().if_contains("name");
        if (name && name->is_string()) return std::nullopt;
      }
      return type_error(k, v, "\"none\", \"auto\" or an object with a string name");
    case Field::model:
      if (!v.is_string() || v.get_string().empty()) return type_error(k, v, "a non-empty string");
      return std::nullopt;
    case Field::messages:
      return check_messages(v);
    case Field::stream:
      if (!v.is_bool() && !v.is_null()) return type_error(k, v, "a boolean");
      return std::nullopt;
    case Field::stream_options:
      if (v.is_null()) return std::nullopt;
      if (!v.is_object()) return type_error(k, v, "an object");
      if (const auto* iu = v.get_object().if_contains("include_usage");
          iu && !iu->is_bool() && !iu->is_null()) {
        return type_error("stream_options.include_usage", *iu, "a boolean");
      }
      return std::nullopt;
    case Field::number:
      if (!v.is_number() && !v.is_null()) return type_error(k, v, "a number");
      return std::nullopt;
    case Field::integer:
      if (!is_integer(v) && !v.is_null()) return type_error(k, v, "an integer");
      return std::nullopt;
    case Field::max_tokens:
      if (v.is_null()) return std::nullopt;
      if (!is_integer(v) || (v.is_int64() && v.get_int64() < 1)) {
        return type_error(k, v, "a positive integer");
      }
      return std::nullopt;
    case Field::stop:
      if (v.is_null() || v.is_string()) return std::nullopt;
      if (v.is_array()) {
        for (const auto& s : v.get_array()) {
          if (!s.is_string()) return type_error(k, v, "a string or an array of strings");
        }
        return std::nullopt;
      }
      return type_error(k, v, "a string or an array of strings");
    case Field::object:
      if (!v.is_object() && !v.is_null()) return type_error(k, v, "an object");
      return std::nullopt;
    case Field::boolean:
      if (!v.is_bool() && !v.is_null()) return type_error(k, v, "a boolean");
      return std::nullopt;
    case Field::string:
      if (!v.is_string() && !v.is_null()) return type_error(k, v, "a string");
      return std::nullopt;
    case Field::array:
      if (!v.is_array() && !v.is_null()) return type_error(k, v, "an array");
      return std::nullopt;
    case Field::tool_choice: {
      static constexpr std::string_view kModes[] = {"none", "auto", "required"};
      static constexpr std::string_view kTypes[] = {"function", "allowed_tools", "custom"};
      if (v.is_null() || one_of(v, kModes)) return std::nullopt;
      if (!v.is_object()) return type_error(k, v, "one of " + quoted_list(kModes) + " or an object");
      const auto& o = v.get_object();
      const auto* type = o.if_contains("type");
      if (!type || !one_of(*type, kTypes)) {
        return error(Reason::invalid_request, "'tool_choice.type' must be one of " + quoted_list(kTypes),
                     "tool_choice.type");
      }
      if (type->get_string() == "function") {
        const auto* fn = o.if_contains("function");
        const auto* name = fn && fn->is_object() ? fn->get_object().if_contains("name") : nullptr;
        if (!name || !name->is_string()) {
          return error(Reason::invalid_request, "'tool_choice.function.name' must be a string",
                       "tool_choice.function.name");
        }
      }
      return std::nullopt;
    }
    case Field::response_format: {
      if (v.is_null()) return std::nullopt;
      if (!v.is_object()) return type_error(k, v, "an object");
      static constexpr std::string_view kFormats[] = {"text", "json_object", "json_schema"};
      const auto* type = v.get_object().if_contains("type");
      if (!type || !one_of(*type, kFormats)) {
        return error(Reason::invalid_request, "'response_format.type' must be one of " + quoted_list(kFormats),
                     "response_format.type");
      }
      if (type->get_string() == "json_schema") {
        const auto* js = v.get_object().if_contains("json_schema");
        const auto* name = js && js->is_object() ? js->get_object().if_contains("name") : nullptr;
        if (!name || !name->is_string()) {
          return error(Reason::invalid_request, "'response_format.json_schema.name' must be a string",
                       "response_format.json_schema.name");
        }
      }
      return std::nullopt;
    }
    case Field::keep_alive:
      if (!v.is_string() && !v.is_number() && !v.is_null()) {
        return type_error(k, v, "a duration string or a number of seconds");
      }
      return std::nullopt;
    case Field::options: {
      if (v.is_null()) return std::nullopt;
      if (!v.is_object()) return type_error(k, v, "an object");
      for (const auto& kv : v.get_object()) {
        const std::string path = "options." + std::string(kv.key());
        auto it = cfg.options.find(std::string_view(kv.key()));
        if (it == cfg.options.end()) {
          return error(Reason::option_not_allowed, "'" + path + "' is not allowed", path);
        }
        if (!kv.value().is_number()) return type_error(path, kv.value(), "a number");
        if (auto e = check_range(path, kv.value(), it->second)) return e;
      }
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// Prompt tokens by OpenAI's formula for chat models: per message 3 + role + content (the
// text parts of an array) + name (+1), then 3 priming the reply; and every other part an
// upstream is sent and charges for: a message's other fields (tool_calls, tool_call_id...)
// and non-text content parts as their JSON, kImageTokenBound per image, the request's
// tools, tool_choice and response_format as their JSON. `count` counts a text.
template <class Count>
std::int64_t prompt_tokens(const json::object& body, Count&& count) {
  auto of = [&](std::string_view t) { return static_cast<std::int64_t>(count(t)); };
  auto as_json = [&](const json::value& v) -> std::int64_t {
    if (v.is_null()) return 0;
    if (v.is_string()) return of(std::string_view(v.get_string()));
    return of(json::serialize(v));
  };
  auto text = [&](const json::value& v) -> std::int64_t {
    if (v.is_string()) return of(std::string_view(v.get_string()));
    std::int64_t n = 0;
    if (v.is_array()) {
      for (const auto& part : v.get_array()) {
        if (!part.is_object()) continue;
        const auto& p = part.get_object();
        const auto* type = p.if_contains("type");
        const std::string_view ty = type && type->is_string() ? std::string_view(type->get_string()) : "";
        if (ty == "text") {
          const auto* t = p.if_contains("text");
          if (t && t->is_string()) n = saturating_add(n, of(std::string_view(t->get_string())));
        } else if (ty == "image_url" || ty == "image" || ty == "input_image") {
          n = saturating_add(n, kImageTokenBound);
        } else {
          n = saturating_add(n, as_json(part));  // audio, files...: as sent
        }
      }
    }
    return n;
  };
  std::int64_t n = tokenizer::kReplyPrimingTokens;
  if (const auto* messages = body.if_contains("messages"); messages && messages->is_array()) {
    for (const auto& m : messages->get_array()) {
      if (!m.is_object()) continue;
      n = saturating_add(n, tokenizer::kTokensPerMessage);
      for (const auto& kv : m.get_object()) {
        const std::string_view k = kv.key();
        const json::value& v = kv.value();
        if (k == "content") {
          n = saturating_add(n, text(v));
        } else if (k == "name") {
          if (v.is_string()) n = saturating_add(n, saturating_add(text(v), tokenizer::kTokensPerName));
        } else if (k == "role") {
          n = saturating_add(n, text(v));
        } else {
          n = saturating_add(n, as_json(v));  // tool_calls, tool_call_id, function_call...
        }
      }
    }
  }
  // (Predicted output is billed: its tokens count, on OpenAI as completion tokens.)
  for (const char* k : {"tools", "tool_choice", "response_format", "functions", "function_call", "prediction"}) {
    if (const auto* v = body.if_contains(k)) n = saturating_add(n, as_json(*v));
  }
  return n;
}

std::string_view sv(const json::string& s) { return {s.data(), s.size()}; }

}  // namespace

// The estimate, and the bound: the same formula with each text's bytes.
// (Saturating: the parts and the fixed overheads are the same in both counts.)
static void estimate_prompt(const json::object& body, ChatRequest& req) {
  std::int64_t estimated = 0, bytes = 0;
  req.prompt_tokens_estimate = prompt_tokens(body, [&](std::string_view t) {
    const auto n = static_cast<std::int64_t>(tokenizer::estimate(t));
    estimated = saturating_add(estimated, n);
    bytes = saturating_add(bytes, static_cast<std::int64_t>(t.size()));
    return n;
  });
  req.prompt_token_bound = saturating_add(req.prompt_tokens_estimate - estimated, bytes);
}

// ---- parse_chat_request -------------------------------------------------------------

ParseResult parse_chat_request(std::string_view body, const config::Config& cfg) {
  json::parse_options opts;
  opts.max_depth = 64;
  boost::system::error_code ec;
  // One arena per request instead of an allocation per JSON node; the parsed value keeps
  // it alive (it is shared with the ChatRequest's body).
  json::storage_ptr arena = json::make_shared_resource<json::monotonic_resource>(std::max<std::size_t>(1024, body.size() * 2));
  json::value root = detail::parse_json(body, ec, arena, opts);
  if (ec) {
    return error(Reason::bad_json, "request body is not valid JSON: " + ec.message(), "");
  }
  if (!root.is_object()) {
    return error(Reason::bad_json, "request body must be a JSON object", "");
  }
  auto& obj = root.get_object();
  for (const auto& kv : obj) {
    const std::string_view k = kv.key();
    const FieldEntry* f = known_field(k);
    if (!f) {
      return error(Reason::option_not_allowed, "unknown parameter '" + std::string(k) + "'",
                   std::string(k));
    }
    if (auto e = check_field(k, *f, kv.value(), cfg)) return std::move(*e);
    if (kv.value().is_number()) {
      auto it = cfg.params.find(k);
      // max_completion_tokens is the newer name of max_tokens: it shares its range
      // unless it has one of its own.
      if (it == cfg.params.end() && k == "max_completion_tokens") it = cfg.params.find("max_tokens");
      if (it != cfg.params.end()) {
        if (auto e = check_range(k, kv.value(), it->second)) return std::move(*e);
      }
    }
  }
  const auto* model = obj.if_contains("model");
  if (!model) return error(Reason::invalid_request, "missing required parameter 'model'", "model");
  const auto* messages = obj.if_contains("messages");
  if (!messages) {
    return error(Reason::invalid_request, "missing required parameter 'messages'", "messages");
  }

  ChatRequest req;
  req.model = std::string(sv(model->get_string()));
  if (const auto* s = obj.if_contains("stream"); s && s->is_bool()) req.stream = s->get_bool();
  if (const auto* so = obj.if_contains("stream_options"); so && so->is_object()) {
    const auto* iu = so->get_object().if_contains("include_usage");
    req.include_usage = req.stream && iu && iu->is_bool() && iu->get_bool();
  }
  for (const char* k : {"max_completion_tokens", "max_tokens"}) {
    if (const auto* m = obj.if_contains(k); m && is_integer(*m)) {
      req.max_tokens = m->is_int64() ? m->get_int64()
                                     : static_cast<std::int64_t>(std::min<std::uint64_t>(
                                           m->get_uint64(), INT64_MAX));
      break;
    }
  }
  estimate_prompt(obj, req);
  // Move-construct (not assign): assignment between different storages deep-copies, and
  // the body must stay in the request's arena.
  std::destroy_at(&req.body);
  std::construct_at(&req.body, std::move(obj));
  return req;
}

void recount_prompt(ChatRequest& req) {
  if (req.task == Task::chat) estimate_prompt(req.body, req);
}

std::int64_t estimate_tokens(std::string_view text) noexcept {
  return static_cast<std::int64_t>(tokenizer::estimate(text));
}

// Folds the relayed text into the running count. The cut is made before the last space
// of the text's tail (where the pre-tokenizer splits anyway), else at a UTF-8 character
// boundary, so a fold adds at most one token to the exact count of the whole text.
void StreamTranslator::fold_relayed() {
  std::string_view text = relayed_text_;
  std::size_t cut = text.size();
  const std::size_t floor = text.size() > 256 ? text.size() - 256 : 0;
  std::size_t space = text.find_last_of(" \n", std::string_view::npos);
  if (space != std::string_view::npos && space > floor) {
    cut = space;
  } else {
    while (cut > floor && (static_cast<unsigned char>(text[cut - 1]) & 0xC0) == 0x80) --cut;  // continuation bytes
    if (cut > floor && static_cast<unsigned char>(text[cut - 1]) >= 0xC0) --cut;                // a lead byte
    if (cut == floor) cut = text.size();
  }
  relayed_counted_ = saturating_add(relayed_counted_,
                                    static_cast<std::int64_t>(counter_->count(text.substr(0, cut), encoding_)));
  relayed_text_.erase(0, cut);
}

std::int64_t StreamTranslator::relayed_tokens() const {
  if (!counter_) return content_chunks_;
  return saturating_add(relayed_counted_, static_cast<std::int64_t>(counter_->count(relayed_text_, encoding_)));
}

std::string completion_output_text(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  std::string out;
  if (ec || !v.is_object()) return out;
  const auto* choices = v.get_object().if_contains("choices");
  if (!choices || !choices->is_array()) return out;
  auto add = [&out](const json::value* s) {
    if (s && s->is_string()) out.append(s->get_string().data(), s->get_string().size());
  };
  for (const auto& c : choices->get_array()) {
    const auto* co = c.if_object();
    const auto* m = co ? co->if_contains("message") : nullptr;
    const auto* mo = m ? m->if_object() : nullptr;
    if (!mo) continue;
    for (const char* k : {"content", "refusal", "reasoning_content", "reasoning"}) add(mo->if_contains(k));
    if (const auto* content = mo->if_contains("content"); content && content->is_array()) {
      for (const auto& part : content->get_array()) {
        const auto* po = part.if_object();
        add(po ? po->if_contains("text") : nullptr);
      }
    }
    const auto* calls = mo->if_contains("tool_calls");
    if (!calls || !calls->is_array()) continue;
    for (const auto& call : calls->get_array()) {
      const auto* callo = call.if_object();
      const auto* fn = callo ? callo->if_contains("function") : nullptr;
      const auto* fo = fn ? fn->if_object() : nullptr;
      if (!fo) continue;
      add(fo->if_contains("name"));
      add(fo->if_contains("arguments"));
    }
  }
  return out;
}

std::int64_t count_prompt_tokens(const ChatRequest& req, const tokenizer::Counter& counter,
                                 tokenizer::Encoding encoding) {
  if (req.task == Task::embed) return count_embedding_tokens(req, counter, encoding);
  return prompt_tokens(req.body, [&](std::string_view t) { return counter.count(t, encoding); });
}

std::int64_t output_token_bound(const ChatRequest& req, config::Provider provider, const config::Config& cfg,
                                bool* unbounded) {
  if (unbounded) *unbounded = false;
  if (req.task == Task::embed) return 0;  // embeddings generate nothing
  const std::int64_t fallback = std::max<std::int64_t>(cfg.rate_limits.reserve_output_tokens, 0);
  // A JSON number as a whole count of tokens (rounded up), saturating.
  auto whole = [](const json::value& v) -> std::optional<std::int64_t> {
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64()) return static_cast<std::int64_t>(std::min<std::uint64_t>(v.get_uint64(), INT64_MAX));
    if (v.is_double()) {
      const double d = std::ceil(v.get_double());
      if (!(d < 9.2e18)) return d > 0 ? std::optional<std::int64_t>(INT64_MAX) : std::optional<std::int64_t>(-1);
      return static_cast<std::int64_t>(d);
    }
    return std::nullopt;
  };
  switch (provider) {
    case config::Provider::anthropic:
      // build_anthropic_call: max_tokens, else the Messages API's required field's default.
      return req.max_tokens.value_or(kAnthropicDefaultMaxTokens);
    case config::Provider::ollama: {
      // build_ollama_call: the client's options.num_predict wins over max_tokens. Ollama
      // treats num_predict <= 0 (-1: until stopped, -2: until the context is full) and no
      // num_predict at all as unbounded.
      std::optional<std::int64_t> predict = req.max_tokens;
      const json::object* options = nullptr;
      if (const auto* o = req.body.if_contains("options"); o && o->is_object()) options = &o->get_object();
      if (options) {
        if (const auto* np = options->if_contains("num_predict")) {
          if (auto w = whole(*np)) predict = *w;
        }
      }
      if (predict && *predict > 0) return *predict;
      if (unbounded) *unbounded = true;
      if (options) {
        if (const auto* ctx = options->if_contains("num_ctx")) {
          if (auto w = whole(*ctx); w && *w > 0) return std::max(*w, fallback);
        }
      }
      if (auto it = cfg.options.find("num_ctx"); it != cfg.options.end() && it->second.max >= 1) {
        const double m = std::ceil(it->second.max);
        return std::max(m < 9.2e18 ? static_cast<std::int64_t>(m) : INT64_MAX, fallback);
      }
      return fallback;
    }
    case config::Provider::openai:
    case config::Provider::simulated: break;
  }
  // OpenAI-compatible: the body passes through, so every choice of `n` has its own bound.
  std::int64_t n = 1;
  if (const auto* nv = req.body.if_contains("n")) {
    if (auto w = whole(*nv); w && *w > 1) n = *w;
  }
  if (!req.max_tokens && unbounded) *unbounded = true;
  return saturating_mul(req.max_tokens.value_or(fallback), n);
}

Reservation reservation(const ChatRequest& req, std::span<const config::Provider> providers,
                        const config::Config& cfg, const tokenizer::Counter* exact, tokenizer::Encoding encoding) {
  Reservation r;
  r.prompt = exact ? count_prompt_tokens(req, *exact, encoding) : prompt_token_bound(req);
  for (const auto p : providers) {
    bool unbounded = false;
    const auto out = output_token_bound(req, p, cfg, &unbounded);
    if (out >= r.output) {
      r.output_unbounded = out > r.output ? unbounded : (r.output_unbounded || unbounded);
      r.output = out;
    }
  }
  if (providers.empty() && req.task != Task::embed) r.output = saturating_mul(req.max_tokens.value_or(cfg.rate_limits.reserve_output_tokens), 1);
  return r;
}

// ---- OpenAI upstream ------------------------------------------------------------------

UpstreamCall build_openai_call(const ChatRequest& req, const config::Backend& backend) {
  UpstreamCall call;
  const std::string_view prefix = backend.path_prefix;
  call.target = std::string(prefix);
  call.target += (prefix.size() >= 3 && prefix.substr(prefix.size() - 3) == "/v1")
                     ? "/chat/completions"
                     : "/v1/chat/completions";

  const std::string& model = backend.model.empty() ? req.model : backend.model;
  std::string& out = call.body;
  out.reserve(256);
  out.push_back('{');
  bool first = true;
  bool wrote_stream_options = false;
  for (const auto& kv : req.body) {
    const std::string_view k = kv.key();
    if (k == "options" || k == "keep_alive") continue;  // Ollama-only
    if (k == "model") {
      append_key(out, first, k);
      append_json_string(out, model);
      continue;
    }
    if (k == "stream_options") {
      // Only valid with stream=true upstream; when streaming, usage is always requested.
      if (!req.stream) continue;
      append_key(out, first, k);
      json::object so;
      if (kv.value().is_object()) so = kv.value().get_object();
      so["include_usage"] = true;
      append_value(out, json::value(std::move(so)));
      wrote_stream_options = true;
      continue;
    }
    append_key(out, first, k);
    append_value(out, kv.value());
  }
  if (req.stream && !wrote_stream_options) {
    append_key(out, first, "stream_options");
    out += R"({"include_usage":true})";
  }
  out.push_back('}');
  return call;
}

// ---- Ollama upstream ------------------------------------------------------------------

namespace {

// OpenAI content (string, parts array or null) -> Ollama content string + images.
void append_ollama_content(std::string& out, bool& first, const json::value& content) {
  if (content.is_string()) {
    append_key(out, first, "content");
    append_json_string(out, sv(content.get_string()));
    return;
  }
  std::string text;
  std::vector<std::string_view> images;
  if (content.is_array()) {
    for (const auto& part : content.get_array()) {
      if (!part.is_object()) continue;
      const auto& p = part.get_object();
      const auto* type = p.if_contains("type");
      if (!type || !type->is_string()) continue;
      if (type->get_string() == "text") {
        if (const auto* t = p.if_contains("text"); t && t->is_string()) {
          if (!text.empty()) text.push_back('\n');
          text.append(sv(t->get_string()));
        }
      } else if (type->get_string() == "image_url") {
        const auto* iu = p.if_contains("image_url");
        const json::value* url = nullptr;
        if (iu && iu->is_string()) url = iu;
        if (iu && iu->is_object()) url = iu->get_object().if_contains("url");
        if (!url || !url->is_string()) continue;
        // Ollama takes raw base64 images; only data: URLs can be forwarded.
        std::string_view u = sv(url->get_string());
        const auto comma = u.find(',');
        if (u.starts_with("data:") && comma != std::string_view::npos &&
            u.substr(0, comma).ends_with(";base64")) {
          images.push_back(u.substr(comma + 1));
        }
      }
    }
  }
  append_key(out, first, "content");
  append_json_string(out, text);
  if (!images.empty()) {
    append_key(out, first, "images");
    out.push_back('[');
    for (std::size_t i = 0; i < images.size(); ++i) {
      if (i) out.push_back(',');
      append_json_string(out, images[i]);
    }
    out.push_back(']');
  }
}

// OpenAI assistant tool_calls (arguments as a JSON string) -> Ollama (arguments object).
void append_ollama_tool_calls(std::string& out, const json::value& calls) {
  if (!calls.is_array()) {
    append_value(out, calls);
    return;
  }
  out.push_back('[');
  bool first_call = true;
  for (const auto& c : calls.get_array()) {
    if (!first_call) out.push_back(',');
    first_call = false;
    const json::object* fn = nullptr;
    if (c.is_object()) {
      if (const auto* f = c.get_object().if_contains("function"); f && f->is_object()) {
        fn = &f->get_object();
      }
    }
    if (!fn) {
      append_value(out, c);
      continue;
    }
    out += R"({"function":{)";
    bool first = true;
    for (const auto& kv : *fn) {
      append_key(out, first, kv.key());
      if (kv.key() == "arguments" && kv.value().is_string()) {
        boost::system::error_code ec;
        json::value args = detail::parse_json(kv.value().get_string(), ec);
        if (!ec && args.is_object()) {
          append_value(out, args);
        } else {
          out += "{}";
        }
      } else {
        append_value(out, kv.value());
      }
    }
    out += "}}";
  }
  out.push_back(']');
}

}  // namespace

UpstreamCall build_ollama_call(const ChatRequest& req, const config::Backend& backend) {
  UpstreamCall call;
  call.target = backend.path_prefix + "/api/chat";
  const std::string& model = backend.model.empty() ? req.model : backend.model;
  const json::object& body = req.body;
  std::string& out = call.body;
  out.reserve(256);
  out += R"({"model":)";
  append_json_string(out, model);

  out += R"(,"messages":[)";
  if (const auto* msgs = body.if_contains("messages"); msgs && msgs->is_array()) {
    bool first_msg = true;
    for (const auto& mv : msgs->get_array()) {
      if (!first_msg) out.push_back(',');
      first_msg = false;
      if (!mv.is_object()) {
        append_value(out, mv);
        continue;
      }
      out.push_back('{');
      bool first = true;
      bool has_content = false;
      for (const auto& kv : mv.get_object()) {
        const std::string_view k = kv.key();
        if (k == "content") {
          append_ollama_content(out, first, kv.value());
          has_content = true;
        } else if (k == "tool_calls") {
          append_key(out, first, k);
          append_ollama_tool_calls(out, kv.value());
        } else {
          append_key(out, first, k);
          append_value(out, kv.value());
        }
      }
      if (!has_content) {
        append_key(out, first, "content");
        out += R"("")";
      }
      out.push_back('}');
    }
  }
  out += "]";

  out += req.stream ? R"(,"stream":true)" : R"(,"stream":false)";

  // Sampling parameters -> options; the client's own "options" win over them.
  json::object options;
  for (const char* k :
       {"temperature", "top_p", "seed", "presence_penalty", "frequency_penalty"}) {
    if (const auto* v = body.if_contains(k); v && !v->is_null()) options[k] = *v;
  }
  if (const auto* stop = body.if_contains("stop")) {
    if (stop->is_string()) {
      options["stop"] = json::array{*stop};
    } else if (stop->is_array()) {
      options["stop"] = *stop;
    }
  }
  if (req.max_tokens) options["num_predict"] = *req.max_tokens;
  if (const auto* o = body.if_contains("options"); o && o->is_object()) {
    for (const auto& kv : o->get_object()) options[kv.key()] = kv.value();
  }
  if (!options.empty()) {
    out += R"(,"options":)";
    append_value(out, json::value(std::move(options)));
  }

  if (const auto* ka = body.if_contains("keep_alive"); ka && !ka->is_null()) {
    out += R"(,"keep_alive":)";
    append_value(out, *ka);
  }
  if (const auto* rf = body.if_contains("response_format"); rf && rf->is_object()) {
    const auto& o = rf->get_object();
    const auto* type = o.if_contains("type");
    if (type && type->is_string() && type->get_string() == "json_object") {
      out += R"(,"format":"json")";
    } else if (type && type->is_string() && type->get_string() == "json_schema") {
      // Ollama structured outputs: "format" takes the JSON schema itself.
      const auto* js = o.if_contains("json_schema");
      const json::value* schema =
          js && js->is_object() ? js->get_object().if_contains("schema") : nullptr;
      if (schema && schema->is_object()) {
        out += R"(,"format":)";
        append_value(out, *schema);
      } else {
        out += R"(,"format":"json")";
      }
    }
  }
  // Ollama has no tool_choice: "none" is honoured by leaving the tools out.
  const auto* choice = body.if_contains("tool_choice");
  const bool no_tools = choice && choice->is_string() && choice->get_string() == "none";
  if (const auto* tools = body.if_contains("tools"); tools && tools->is_array() && !no_tools) {
    out += R"(,"tools":)";
    append_value(out, *tools);
  }
  out.push_back('}');
  return call;
}

void append_usage(std::string& out, std::int64_t prompt, std::int64_t completion) {
  out += R"({"prompt_tokens":)";
  out += std::to_string(prompt);
  out += R"(,"completion_tokens":)";
  out += std::to_string(completion);
  out += R"(,"total_tokens":)";
  out += std::to_string(prompt + completion);
  out += '}';
}

namespace {
void append_head(std::string& out, std::string_view request_id, std::string_view object, std::string_view model) {
  out += R"({"id":"chatcmpl-)";
  out += request_id;
  out += R"(","object":")";
  out += object;
  out += R"(","created":)";
  out += std::to_string(static_cast<std::int64_t>(std::time(nullptr)));
  out += R"(,"model":)";
  append_json_string(out, model);
  out += R"(,"choices":[)";
}
}  // namespace

void append_completion_head(std::string& out, std::string_view request_id, std::string_view model) {
  append_head(out, request_id, "chat.completion", model);
}

std::string chunk_prefix(std::string_view request_id, std::string_view model) {
  std::string p = "data: ";
  append_head(p, request_id, "chat.completion.chunk", model);
  return p;
}

void append_stream_end(std::string& out, std::string_view prefix, bool include_usage, std::int64_t prompt,
                       std::int64_t completion) {
  if (include_usage) {
    out += prefix;
    out += R"(],"usage":)";
    append_usage(out, prompt, completion);
    out += "}\n\n";
  }
  out += "data: [DONE]\n\n";
}

std::string canned_openai_answer(const ChatRequest& req, std::string_view request_id, std::string_view text) {
  std::string out;
  if (!req.stream) {
    append_completion_head(out, request_id, req.model);
    out += R"({"index":0,"message":{"role":"assistant","refusal":null,"content":)";
    append_json_string(out, text);
    out += R"(},"logprobs":null,"finish_reason":"stop"}],"usage":)";
    append_usage(out, 0, 0);
    out += '}';
    return out;
  }
  const std::string prefix = chunk_prefix(request_id, req.model);
  out += prefix;
  out += R"({"index":0,"delta":{"role":"assistant","content":)";
  append_json_string(out, text);
  out += R"(},"finish_reason":null})";
  out += chunk_close(req.include_usage);
  out += prefix;
  out += R"({"index":0,"delta":{},"finish_reason":"stop"})";
  out += chunk_close(req.include_usage);
  append_stream_end(out, prefix, true, 0, 0);
  return out;
}

}  // namespace sluice::llm
