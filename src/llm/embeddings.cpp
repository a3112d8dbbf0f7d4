// Embeddings: the request's checks, its token count, the upstream calls and the answers.
#include "llm/embeddings.hpp"

#include <simdjson.h>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/serialize.hpp>
#include <cmath>
#include <vector>

#include "common/text.hpp"
#include "llm/json_parse.hpp"

namespace sluice::llm {

namespace json = boost::json;

namespace {

RequestError bad(Reason r, std::string message, std::string param) {
  return RequestError{r, std::move(message), std::move(param)};
}

bool is_token_id(const json::value& v) {
  return (v.is_int64() && v.get_int64() >= 0) || v.is_uint64();
}

// A token array: non-empty, every element an integer >= 0.
bool is_token_array(const json::array& a) {
  if (a.empty()) return false;
  for (const auto& t : a) {
    if (!is_token_id(t)) return false;
  }
  return true;
}

std::optional<RequestError> check_input(const json::value& v) {
  static constexpr const char* kShape =
      "'input' must be a non-empty string, an array of non-empty strings, an array of token ids or an array of "
      "arrays of token ids";
  if (v.is_string()) {
    if (v.get_string().empty()) return bad(Reason::invalid_request, "'input' must not be empty", "input");
    return std::nullopt;
  }
  if (!v.is_array() || v.get_array().empty()) return bad(Reason::invalid_request, kShape, "input");
  const auto& a = v.get_array();
  if (a.size() > kMaxEmbeddingInputs) {
    return bad(Reason::invalid_request,
               "'input' has " + std::to_string(a.size()) + " items; at most " + std::to_string(kMaxEmbeddingInputs),
               "input");
  }
  if (a.front().is_string()) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (!a[i].is_string() || a[i].get_string().empty()) {
        return bad(Reason::invalid_request, "input[" + std::to_string(i) + "] must be a non-empty string",
                   "input[" + std::to_string(i) + "]");
      }
    }
    return std::nullopt;
  }
  if (is_token_id(a.front())) {
    if (!is_token_array(a)) return bad(Reason::invalid_request, kShape, "input");
    return std::nullopt;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_array() || !is_token_array(a[i].get_array())) {
      return bad(Reason::invalid_request, "input[" + std::to_string(i) + "] must be a non-empty array of token ids",
                 "input[" + std::to_string(i) + "]");
    }
  }
  return std::nullopt;
}

// Calls text(s) for every string of the input and ids(n) for every array of n token ids.
template <class Text, class Ids>
void each_input(const json::value& input, Text&& text, Ids&& ids) {
  if (input.is_string()) {
    text(std::string_view(input.get_string()));
    return;
  }
  if (!input.is_array()) return;
  const auto& a = input.get_array();
  if (!a.empty() && !a.front().is_string() && !a.front().is_array()) {
    ids(static_cast<std::int64_t>(a.size()));
    return;
  }
  for (const auto& e : a) {
    if (e.is_string()) text(std::string_view(e.get_string()));
    else if (e.is_array()) ids(static_cast<std::int64_t>(e.get_array().size()));
  }
}

bool wants_base64(const ChatRequest& req) {
  const auto* f = req.body.if_contains("encoding_format");
  return f && f->is_string() && f->get_string() == "base64";
}

// The body as sent, with the model replaced; `drop` names fields left out.
void append_body(std::string& out, const ChatRequest& req, std::string_view model,
                 std::initializer_list<std::string_view> drop = {}) {
  out.push_back('{');
  bool first = true;
  for (const auto& kv : req.body) {
    const std::string_view k = kv.key();
    if (std::find(drop.begin(), drop.end(), k) != drop.end()) continue;
    if (!first) out.push_back(',');
    first = false;
    append_json_string(out, k);
    out.push_back(':');
    if (k == "model") append_json_string(out, model);
    else out += json::serialize(kv.value());
  }
  out.push_back('}');
}

std::string target(const config::Backend& backend, std::string_view v1_path, std::string_view root_path) {
  const std::string_view prefix = backend.path_prefix;
  std::string t(prefix);
  t += prefix.ends_with("/v1") ? v1_path : root_path;
  return t;
}

}  // namespace

ParseResult parse_embeddings_request(std::string_view body, const config::Config& cfg) {
  (void)cfg;  // no configured ranges apply to embeddings yet
  json::parse_options opts;
  opts.max_depth = 16;
  boost::system::error_code ec;
  json::storage_ptr arena = json::make_shared_resource<json::monotonic_resource>(std::max<std::size_t>(1024, body.size() * 2));
  json::value root = detail::parse_json(body, ec, arena, opts);
  if (ec) return bad(Reason::bad_json, "request body is not valid JSON: " + ec.message(), "");
  if (!root.is_object()) return bad(Reason::bad_json, "request body must be a JSON object", "");
  auto& obj = root.get_object();
  for (const auto& kv : obj) {
    const std::string_view k = kv.key();
    const json::value& v = kv.value();
    if (k == "model") {
      if (!v.is_string() || v.get_string().empty()) {
        return bad(Reason::invalid_request, "'model' must be a non-empty string", "model");
      }
    } else if (k == "input") {
      if (auto e = check_input(v)) return std::move(*e);
    } else if (k == "encoding_format") {
      if (!v.is_string() || (v.get_string() != "float" && v.get_string() != "base64")) {
        return bad(Reason::invalid_request, "'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
      }
    } else if (k == "dimensions") {
      if (!(v.is_int64() && v.get_int64() >= 1) && !v.is_uint64()) {
        return bad(Reason::invalid_request, "'dimensions' must be an integer >= 1", "dimensions");
      }
    } else if (k == "user") {
      if (!v.is_string()) return bad(Reason::invalid_request, "'user' must be a string", "user");
    } else {
      return bad(Reason::option_not_allowed, "unknown parameter '" + std::string(k) + "'", std::string(k));
    }
  }
  const auto* model = obj.if_contains("model");
  if (!model) return bad(Reason::invalid_request, "missing required parameter 'model'", "model");
  const auto* input = obj.if_contains("input");
  if (!input) return bad(Reason::invalid_request, "missing required parameter 'input'", "input");

  ChatRequest req;
  req.task = Task::embed;
  req.model = std::string(model->get_string());
  std::int64_t estimate = 0, bound = 0;
  each_input(
      *input,
      [&](std::string_view t) {
        estimate = saturating_add(estimate, static_cast<std::int64_t>(tokenizer::estimate(t)) + kEmbeddingInputOverhead);
        // A BPE, WordPiece or SentencePiece token is at least a byte.
        bound = saturating_add(bound, static_cast<std::int64_t>(t.size()) + kEmbeddingInputOverhead);
      },
      [&](std::int64_t n) {
        estimate = saturating_add(estimate, n + kEmbeddingInputOverhead);
        bound = saturating_add(bound, n + kEmbeddingInputOverhead);
      });
  req.prompt_tokens_estimate = estimate;
  req.prompt_token_bound = bound;
  std::destroy_at(&req.body);
  std::construct_at(&req.body, std::move(obj));
  return req;
}

std::int64_t count_embedding_tokens(const ChatRequest& req, const tokenizer::Counter& counter,
                                    tokenizer::Encoding encoding) {
  std::int64_t n = 0;
  const auto* input = req.body.if_contains("input");
  if (!input) return 0;
  each_input(
      *input,
      [&](std::string_view t) {
        n = saturating_add(n, static_cast<std::int64_t>(counter.count(t, encoding)) + kEmbeddingInputOverhead);
      },
      [&](std::int64_t ids) { n = saturating_add(n, ids + kEmbeddingInputOverhead); });
  return n;
}

std::optional<RequestError> embeddings_unsupported(const ChatRequest& req, config::Provider provider) {
  switch (provider) {
    case config::Provider::anthropic:
      return bad(Reason::invalid_request, "Anthropic has no embeddings API", "model");
    case config::Provider::ollama: {
      const auto* input = req.body.if_contains("input");
      if (input && input->is_array() && !input->get_array().empty() && !input->get_array().front().is_string()) {
        return bad(Reason::invalid_request, "Ollama embeds text only, not token ids", "input");
      }
      return std::nullopt;
    }
    case config::Provider::openai:
    case config::Provider::simulated: return std::nullopt;
  }
  return std::nullopt;
}

UpstreamCall build_openai_embeddings_call(const ChatRequest& req, const config::Backend& backend) {
  UpstreamCall call;
  call.target = target(backend, "/embeddings", "/v1/embeddings");
  append_body(call.body, req, backend.model.empty() ? std::string_view(req.model) : std::string_view(backend.model));
  return call;
}

UpstreamCall build_ollama_embeddings_call(const ChatRequest& req, const config::Backend& backend) {
  UpstreamCall call;
  call.target = std::string(backend.path_prefix) + "/api/embed";
  // encoding_format is answered by the gateway (translate_ollama_embeddings); `user` has
  // no Ollama field.
  append_body(call.body, req, backend.model.empty() ? std::string_view(req.model) : std::string_view(backend.model),
              {"encoding_format", "user"});
  return call;
}

std::optional<Completion> read_openai_embeddings(std::string upstream_body) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(upstream_body.data(), upstream_body.size()).get(root) != simdjson::SUCCESS) return std::nullopt;
  simdjson::dom::object obj;
  simdjson::dom::array data;
  if (root.get_object().get(obj) != simdjson::SUCCESS || obj["data"].get_array().get(data) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  Completion c;
  c.usage.completion_tokens = 0;  // embeddings generate nothing
  simdjson::dom::object usage;
  std::int64_t n = 0;
  if (obj["usage"].get_object().get(usage) == simdjson::SUCCESS &&
      usage["prompt_tokens"].get_int64().get(n) == simdjson::SUCCESS) {
    c.usage.prompt_tokens = usage_count(n);
  }
  c.body = std::move(upstream_body);
  return c;
}

std::optional<Completion> translate_ollama_embeddings(std::string_view upstream_body, const ChatRequest& req) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(upstream_body.data(), upstream_body.size()).get(root) != simdjson::SUCCESS) return std::nullopt;
  simdjson::dom::object obj;
  simdjson::dom::array vectors;
  if (root.get_object().get(obj) != simdjson::SUCCESS || obj["embeddings"].get_array().get(vectors) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  const bool b64 = wants_base64(req);
  // One vector per input, all of one length.
  std::size_t inputs = 0;
  if (const auto* input = req.body.if_contains("input")) each_input(*input, [&](std::string_view) { ++inputs; }, [&](std::int64_t) { ++inputs; });
  if (vectors.size() != inputs) return std::nullopt;
  std::size_t dims = 0;
  Completion c;
  c.usage.completion_tokens = 0;
  std::int64_t n = 0;
  if (obj["prompt_eval_count"].get_int64().get(n) == simdjson::SUCCESS) c.usage.prompt_tokens = usage_count(n);
  std::string& out = c.body;
  out.reserve(upstream_body.size() + 128);
  out += R"({"object":"list","data":[)";
  std::size_t index = 0;
  std::vector<float> floats;
  for (simdjson::dom::element v : vectors) {
    simdjson::dom::array values;
    if (v.get_array().get(values) != simdjson::SUCCESS) return std::nullopt;
    if (index == 0) dims = values.size();
    if (values.size() != dims) return std::nullopt;
    if (index) out += ',';
    out += R"({"object":"embedding","index":)";
    out += std::to_string(index++);
    out += R"(,"embedding":)";
    if (b64) {
      floats.clear();
      for (simdjson::dom::element x : values) {
        double d = 0;
        if (x.get_double().get(d) != simdjson::SUCCESS || !std::isfinite(static_cast<float>(d))) return std::nullopt;
        floats.push_back(static_cast<float>(d));
      }
      out += '"';
      append_float32_base64(out, floats);
      out += '"';
    } else {
      for (simdjson::dom::element x : values) {
        double d = 0;
        if (x.get_double().get(d) != simdjson::SUCCESS || !std::isfinite(static_cast<float>(d))) return std::nullopt;
      }
      out += simdjson::minify(values);  // the numbers as the upstream wrote them
    }
    out += '}';
  }
  out += R"(],"model":)";
  append_json_string(out, req.model);
  // (Without the upstream's count, the estimate; settlement counts exactly.)
  const std::int64_t p = c.usage.prompt_tokens >= 0 ? c.usage.prompt_tokens : req.prompt_tokens_estimate;
  out += R"(,"usage":{"prompt_tokens":)";
  out += std::to_string(p);
  out += R"(,"total_tokens":)";
  out += std::to_string(p);
  out += "}}";
  return c;
}

}  // namespace sluice::llm
