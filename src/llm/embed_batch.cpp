// Embeddings requests merged into one upstream call and its answer split back
// (llm/embeddings.hpp, "Micro-batching"). No I/O here.
#include <algorithm>
#include <boost/json.hpp>

#include "llm/embeddings.hpp"

namespace sluice::llm {

namespace json = boost::json;

namespace {

bool token_ids(const json::array& a) { return !a.empty() && !a.front().is_string() && !a.front().is_array(); }

// Shares `total` in proportion to `weights` (each at least 0): the largest remainders get
// the units left, so the shares add up to the total.
std::vector<std::int64_t> apportion(std::int64_t total, std::span<const std::int64_t> weights) {
  std::vector<std::int64_t> out(weights.size(), 0);
  if (weights.empty() || total <= 0) return out;
  long double sum = 0;
  for (auto w : weights) sum += static_cast<long double>(std::max<std::int64_t>(w, 0));
  std::vector<std::pair<long double, std::size_t>> rest;
  std::int64_t given = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const long double exact = sum > 0 ? static_cast<long double>(total) * static_cast<long double>(std::max<std::int64_t>(weights[i], 0)) / sum
                                      : static_cast<long double>(total) / static_cast<long double>(weights.size());
    out[i] = static_cast<std::int64_t>(exact);
    given += out[i];
    rest.emplace_back(exact - static_cast<long double>(out[i]), i);
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t k = 0; given < total && k < rest.size(); ++k, ++given) ++out[rest[k].second];
  // Every request is charged something when the total allows: a share rounded to 0 takes
  // one from the largest.
  if (total >= static_cast<std::int64_t>(out.size())) {
    for (auto& x : out) {
      if (x > 0) continue;
      auto big = std::max_element(out.begin(), out.end());
      --*big;
      x = 1;
    }
  }
  return out;
}

std::int64_t count_of(const json::object& o, std::string_view a, std::string_view b = {}) {
  const json::value* v = o.if_contains(a);
  if (v && !b.empty()) v = v->is_object() ? v->get_object().if_contains(b) : nullptr;
  return v && v->is_int64() ? v->get_int64() : v && v->is_uint64() ? static_cast<std::int64_t>(v->get_uint64()) : -1;
}

}  // namespace

std::string embedding_batch_key(const ChatRequest& req) {
  std::string k;
  if (const auto* f = req.body.if_contains("encoding_format")) k += json::serialize(*f);
  k += '|';
  if (const auto* d = req.body.if_contains("dimensions")) k += json::serialize(*d);
  k += '|';
  const auto* in = req.body.if_contains("input");
  const bool ids = in && in->is_array() && !in->get_array().empty() && !in->get_array().front().is_string();
  k += ids ? "ids" : "text";
  return k;
}

std::vector<json::value> embedding_inputs(const ChatRequest& req) {
  std::vector<json::value> out;
  const auto* in = req.body.if_contains("input");
  if (!in) return out;
  if (in->is_string()) {
    out.push_back(*in);
  } else if (in->is_array()) {
    const auto& a = in->get_array();
    if (token_ids(a)) {
      out.push_back(a);  // one input of token ids
    } else {
      out.assign(a.begin(), a.end());
    }
  }
  return out;
}

ChatRequest merge_embeddings(const ChatRequest& first, json::array inputs) {
  ChatRequest m;
  m.task = Task::embed;
  m.model = first.model;
  m.prompt_tokens_estimate = first.prompt_tokens_estimate;
  m.prompt_token_bound = first.prompt_token_bound;
  for (const auto& kv : first.body) {
    if (kv.key() != "input" && kv.key() != "user") m.body.emplace(kv.key(), kv.value());
  }
  m.body["input"] = std::move(inputs);
  return m;
}

std::optional<std::vector<std::string>> split_embeddings_answer(config::Provider wire, std::string_view body,
                                                                std::span<const std::size_t> counts,
                                                                std::span<const std::int64_t> weights) {
  boost::system::error_code ec;
  json::value root = json::parse(body, ec);
  if (ec || !root.is_object()) return std::nullopt;
  const auto& o = root.get_object();
  std::size_t all = 0;
  for (auto c : counts) all += c;
  std::vector<std::string> out;
  out.reserve(counts.size());
  if (wire == config::Provider::ollama) {
    const auto* es = o.if_contains("embeddings");
    if (!es || !es->is_array() || es->get_array().size() != all) return std::nullopt;
    const auto& vectors = es->get_array();
    const std::int64_t prompt = count_of(o, "prompt_eval_count");
    const auto shares = apportion(std::max<std::int64_t>(prompt, 0), weights);
    std::size_t at = 0;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      json::object one;
      if (const auto* m = o.if_contains("model")) one["model"] = *m;
      json::array mine;
      for (std::size_t i = 0; i < counts[k]; ++i) mine.push_back(vectors[at++]);
      one["embeddings"] = std::move(mine);
      if (prompt >= 0) one["prompt_eval_count"] = shares[k];  // (absent: each request counts its own)
      out.push_back(json::serialize(one));
    }
    return out;
  }
  const auto* data = o.if_contains("data");
  if (!data || !data->is_array() || data->get_array().size() != all) return std::nullopt;
  // By index (an upstream may list them in any order), each index once.
  std::vector<const json::object*> by_index(all, nullptr);
  for (const auto& d : data->get_array()) {
    const auto* item = d.if_object();
    const json::value* idx = item ? item->if_contains("index") : nullptr;
    if (!idx || !idx->is_number()) return std::nullopt;
    const auto i = idx->to_number<std::int64_t>(ec);
    if (ec || i < 0 || static_cast<std::size_t>(i) >= all || by_index[static_cast<std::size_t>(i)]) return std::nullopt;
    by_index[static_cast<std::size_t>(i)] = item;
  }
  const std::int64_t prompt = count_of(o, "usage", "prompt_tokens");
  const auto shares = apportion(std::max<std::int64_t>(prompt, 0), weights);
  std::size_t at = 0;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    json::object one;
    one["object"] = "list";
    json::array mine;
    for (std::size_t i = 0; i < counts[k]; ++i) {
      json::object item = *by_index[at++];
      item["index"] = static_cast<std::int64_t>(i);
      mine.push_back(std::move(item));
    }
    one["data"] = std::move(mine);
    if (const auto* m = o.if_contains("model")) one["model"] = *m;
    if (prompt >= 0) one["usage"] = json::object{{"prompt_tokens", shares[k]}, {"total_tokens", shares[k]}};
    out.push_back(json::serialize(one));
  }
  return out;
}

}  // namespace sluice::llm
