#include "cache/semantic.hpp"

#include <hnswlib/hnswlib.h>

#include <bit>
#include <boost/json.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/text.hpp"
#include "config/backend.hpp"
#include "llm/chat.hpp"

namespace sluice::cache {

namespace json = boost::json;

namespace {

std::uint64_t hash64(std::string_view s, std::uint64_t seed = 0) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL ^ seed;  // FNV-1a, then MurmurHash3's fmix64
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

// The words of a text: runs of ASCII letters and digits (lower-cased) and of non-ASCII
// bytes (UTF-8 letters); anything else separates them.
std::vector<std::string> words_of(std::string_view text) {
  std::vector<std::string> words;
  std::string w;
  for (unsigned char c : text) {
    if (c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')) {
      w += static_cast<char>(c);
    } else if (c >= 'A' && c <= 'Z') {
      w += static_cast<char>(c - 'A' + 'a');
    } else if (!w.empty()) {
      words.push_back(std::move(w));
      w.clear();
    }
  }
  if (!w.empty()) words.push_back(std::move(w));
  return words;
}

// The UTF-8 characters of `w`, as the byte offsets they start at (a continuation byte
// does not start one).
std::vector<std::size_t> char_starts(std::string_view w) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if ((static_cast<unsigned char>(w[i]) & 0xC0) != 0x80) at.push_back(i);
  }
  return at;
}

}  // namespace

std::uint64_t simhash(std::string_view text) {
  std::int64_t weight[64] = {};
  auto feature = [&weight](std::string_view f, std::uint64_t seed, int w) {
    const std::uint64_t h = hash64(f, seed);
    for (int b = 0; b < 64; ++b) weight[b] += (h >> b & 1) ? w : -w;
  };
  const auto words = words_of(text);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const auto starts = char_starts(w);
    if (starts.size() > 3 && static_cast<unsigned char>(w[0]) >= 0x80) {
      // A script written without spaces: overlapping pairs of characters.
      for (std::size_t k = 0; k + 1 < starts.size(); ++k) {
        const std::size_t end = k + 2 < starts.size() ? starts[k + 2] : w.size();
        feature(std::string_view(w).substr(starts[k], end - starts[k]), 3, 2);
      }
      continue;
    }
    feature(w, 1, 2);
    if (i + 1 < words.size()) {
      std::string pair = w;
      pair += ' ';
      pair += words[i + 1];
      feature(pair, 2, 1);
    }
  }
  std::uint64_t h = 0;
  for (int b = 0; b < 64; ++b) {
    if (weight[b] > 0) h |= std::uint64_t{1} << b;
  }
  return h;
}

int hamming(std::uint64_t a, std::uint64_t b) noexcept { return std::popcount(a ^ b); }

std::string semantic_text(const llm::ChatRequest& req, bool tools) {
  const json::object& body = req.body;
  if (!tools && (body.contains("tools") || body.contains("functions"))) return {};
  const auto* messages = body.if_contains("messages");
  if (!messages || !messages->is_array()) return {};
  std::string out;
  for (const auto& m : messages->get_array()) {
    const auto* o = m.if_object();
    if (!o) return {};
    const auto* role = o->if_contains("role");
    if (!role || !role->is_string()) return {};
    const std::string_view r = role->get_string();
    if (!tools && (r == "tool" || r == "function" || o->contains("tool_calls") || o->contains("function_call"))) {
      return {};
    }
    auto line = [&](std::string_view t) {
      if (!out.empty()) out += '\n';
      out += r;
      out += ": ";
      out += t;
    };
    const auto* content = o->if_contains("content");
    if (!content || content->is_null()) continue;
    if (content->is_string()) {
      line(content->get_string());
    } else if (content->is_array()) {
      for (const auto& part : content->get_array()) {
        const auto* p = part.if_object();
        const auto* type = p ? p->if_contains("type") : nullptr;
        const auto* text = p ? p->if_contains("text") : nullptr;
        // Only text: an image, audio or a file makes two prompts with the same words differ.
        if (!type || !type->is_string() || type->get_string() != "text" || !text || !text->is_string()) return {};
        line(text->get_string());
      }
    } else {
      return {};
    }
  }
  return out;
}

std::string embedding_target(config::Provider provider, std::string_view path_prefix) {
  std::string t(path_prefix);
  if (provider == config::Provider::ollama) t += "/api/embed";
  else t += path_prefix.ends_with("/v1") ? "/embeddings" : "/v1/embeddings";
  return t;
}

std::string embedding_body(std::string_view model, std::string_view text) {
  std::string b = R"({"model":)";
  append_json_string(b, model);
  b += R"(,"input":)";
  append_json_string(b, text);
  b += '}';
  return b;
}

std::optional<std::vector<float>> read_embedding(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::array* values = nullptr;
  const auto& o = v.get_object();
  if (const auto* data = o.if_contains("data"); data && data->is_array() && data->get_array().size() == 1) {
    const auto* item = data->get_array()[0].if_object();
    const auto* e = item ? item->if_contains("embedding") : nullptr;
    if (e && e->is_array()) values = &e->get_array();
  } else if (const auto* es = o.if_contains("embeddings"); es && es->is_array() && es->get_array().size() == 1) {
    values = es->get_array()[0].if_array();
  }
  if (!values || values->empty() || values->size() > 65536) return std::nullopt;
  std::vector<float> out;
  out.reserve(values->size());
  double norm2 = 0;
  for (const auto& x : *values) {
    if (!x.is_number()) return std::nullopt;
    const double d = x.to_number<double>();
    if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) return std::nullopt;
    out.push_back(static_cast<float>(d));
    norm2 += d * d;
  }
  if (!(norm2 > 0) || !std::isfinite(norm2)) return std::nullopt;
  const double inv = 1.0 / std::sqrt(norm2);
  for (float& x : out) x = static_cast<float>(x * inv);
  return out;
}

std::vector<std::string> encode_fields(const Remembered& r) {
  std::string sim;
  static constexpr char kHex[] = "0123456789abcdef";
  for (int s = 60; s >= 0; s -= 4) sim += kHex[r.simhash >> s & 0xF];
  std::string vec(r.vector.size() * sizeof(float), '\0');
  for (std::size_t i = 0; i < r.vector.size(); ++i) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(r.vector[i]);
    for (int k = 0; k < 4; ++k) vec[i * 4 + static_cast<std::size_t>(k)] = static_cast<char>(bits >> (8 * k) & 0xFF);
  }
  return {"r", r.route, "p", r.partition, "h", r.hash, "s", std::move(sim), "v", std::move(vec)};
}

std::optional<Remembered> decode_fields(std::span<const std::string> fv) {
  Remembered r;
  bool got[5] = {};
  for (std::size_t i = 0; i + 1 < fv.size(); i += 2) {
    const std::string& f = fv[i];
    const std::string& v = fv[i + 1];
    if (f == "r") r.route = v, got[0] = true;
    else if (f == "p") r.partition = v, got[1] = true;
    else if (f == "h") r.hash = v, got[2] = true;
    else if (f == "s") {
      if (v.size() != 16) return std::nullopt;
      std::uint64_t h = 0;
      for (char c : v) {
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return std::nullopt;
        h = h << 4 | static_cast<std::uint64_t>(d);
      }
      r.simhash = h;
      got[3] = true;
    } else if (f == "v") {
      if (v.size() % 4 != 0 || v.size() > 65536 * 4) return std::nullopt;
      r.vector.resize(v.size() / 4);
      for (std::size_t k = 0; k < r.vector.size(); ++k) {
        std::uint32_t bits = 0;
        for (int b = 0; b < 4; ++b) bits |= static_cast<std::uint32_t>(static_cast<unsigned char>(v[k * 4 + static_cast<std::size_t>(b)])) << (8 * b);
        r.vector[k] = std::bit_cast<float>(bits);
        if (!std::isfinite(r.vector[k])) return std::nullopt;
      }
      got[4] = true;
    }
  }
  for (bool g : got) {
    if (!g) return std::nullopt;
  }
  if (r.route.empty() || r.partition.size() != 64 || r.hash.size() != 64) return std::nullopt;
  return r;
}

// One partition: its entries in slots (a slot's number is its label in the HNSW graph),
// replaced oldest first once max_entries are held.
struct SemanticIndex::Partition {
  struct Slot {
    std::string hash;
    std::uint64_t simhash = 0;
    bool live = false;
    bool vector = false;  // in the graph (not marked deleted)
  };
  std::string route;
  std::uint64_t used = 0;  // for the least recently used partition
  std::vector<Slot> slots;
  std::size_t next = 0;  // the slot replaced next when full
  std::unordered_map<std::string, std::size_t> by_hash;
  std::size_t dim = 0;  // the vectors' length (the first one's)
  std::size_t capacity = 0;
  std::size_t vectors = 0;
  std::unique_ptr<hnswlib::InnerProductSpace> space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> graph;

  void unvector(std::size_t i) {
    if (!slots[i].vector) return;
    slots[i].vector = false;
    --vectors;
    try {
      graph->markDelete(i);
    } catch (const std::exception&) {
    }
  }
};

SemanticIndex::SemanticIndex(std::size_t max_entries, std::size_t max_partitions)
    : max_entries_(std::max<std::size_t>(max_entries, 1)), max_partitions_(std::max<std::size_t>(max_partitions, 1)) {}
SemanticIndex::~SemanticIndex() = default;

SemanticIndex::Partition* SemanticIndex::find(const std::string& route, const std::string& partition) {
  auto it = parts_.find(route + '\n' + partition);
  if (it == parts_.end()) return nullptr;
  it->second->used = ++tick_;
  return it->second.get();
}

std::optional<Match> SemanticIndex::by_simhash(const std::string& route, const std::string& partition, std::uint64_t h,
                                               int max_distance) {
  if (max_distance < 0) return std::nullopt;
  std::lock_guard lock(mu_);
  Partition* p = find(route, partition);
  if (!p) return std::nullopt;
  // A scan: a popcount per entry (10,000 entries: a few µs), exact for any distance.
  int best = max_distance + 1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < p->slots.size(); ++i) {
    if (!p->slots[i].live) continue;
    const int d = hamming(p->slots[i].simhash, h);
    if (d < best) {
      best = d;
      at = i;
      if (d == 0) break;
    }
  }
  if (best > max_distance) return std::nullopt;
  return Match{p->slots[at].hash, 1.0 - best / 64.0, true};
}

std::optional<Match> SemanticIndex::nearest(const std::string& route, const std::string& partition,
                                            std::span<const float> v, double threshold) {
  std::lock_guard lock(mu_);
  Partition* p = find(route, partition);
  if (!p || !p->graph || p->vectors == 0 || v.size() != p->dim) return std::nullopt;
  std::priority_queue<std::pair<float, hnswlib::labeltype>> found;
  try {
    found = p->graph->searchKnn(v.data(), std::min<std::size_t>(4, p->vectors));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::optional<Match> best;
  while (!found.empty()) {  // farthest first
    const auto [dist, label] = found.top();
    found.pop();
    if (label >= p->slots.size() || !p->slots[label].vector) continue;
    const double sim = 1.0 - static_cast<double>(dist);
    if (sim >= threshold && (!best || sim >= best->similarity)) best = Match{p->slots[label].hash, sim, false};
  }
  return best;
}

bool SemanticIndex::add(const Remembered& r) {
  std::lock_guard lock(mu_);
  const std::string name = r.route + '\n' + r.partition;
  Partition* p = find(r.route, r.partition);
  if (!p) {
    if (parts_.size() >= max_partitions_) {
      auto lru = parts_.begin();
      for (auto it = parts_.begin(); it != parts_.end(); ++it) {
        if (it->second->used < lru->second->used) lru = it;
      }
      entries_ -= lru->second->by_hash.size();
      parts_.erase(lru);
    }
    auto made = std::make_unique<Partition>();
    made->route = r.route;
    made->used = ++tick_;
    p = made.get();
    parts_.emplace(name, std::move(made));
  }
  std::size_t at;
  if (auto it = p->by_hash.find(r.hash); it != p->by_hash.end()) {
    at = it->second;
    if (p->slots[at].vector || r.vector.empty()) return false;
  } else {
    if (p->slots.size() < max_entries_) {
      at = p->slots.size();
      p->slots.emplace_back();
    } else {
      at = p->next;
      p->next = (p->next + 1) % max_entries_;
      auto& old = p->slots[at];
      if (old.live) {
        p->by_hash.erase(old.hash);
        --entries_;
      }
      p->unvector(at);
    }
    p->slots[at] = Partition::Slot{r.hash, r.simhash, true, false};
    p->by_hash.emplace(r.hash, at);
    ++entries_;
  }
  if (r.vector.empty()) return true;
  if (!p->graph) {
    p->dim = r.vector.size();
    p->capacity = std::min<std::size_t>(64, max_entries_);
    p->space = std::make_unique<hnswlib::InnerProductSpace>(p->dim);
    p->graph = std::make_unique<hnswlib::HierarchicalNSW<float>>(p->space.get(), p->capacity, 16, 100);
    p->graph->setEf(64);
  }
  if (r.vector.size() != p->dim) return false;
  try {
    if (at >= p->capacity) {
      p->capacity = std::min(max_entries_, std::max(p->capacity * 2, at + 1));
      p->graph->resizeIndex(p->capacity);
    }
    p->graph->addPoint(r.vector.data(), at);  // (a label seen before: updated, undeleted)
  } catch (const std::exception&) {
    return false;
  }
  p->slots[at].vector = true;
  ++p->vectors;
  return true;
}

void SemanticIndex::forget(const std::string& route, const std::string& partition, const std::string& hash) {
  std::lock_guard lock(mu_);
  auto one = [&](Partition& p) {
    auto it = p.by_hash.find(hash);
    if (it == p.by_hash.end()) return;
    const std::size_t at = it->second;
    p.by_hash.erase(it);
    p.slots[at].live = false;
    p.unvector(at);
    --entries_;
  };
  if (!partition.empty()) {
    if (Partition* p = find(route, partition)) one(*p);
    return;
  }
  for (auto& [name, p] : parts_) {
    if (p->route == route) one(*p);
  }
}

std::size_t SemanticIndex::drop(const std::string& route) {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (auto it = parts_.begin(); it != parts_.end();) {
    if (route.empty() || it->second->route == route) {
      n += it->second->by_hash.size();
      it = parts_.erase(it);
    } else {
      ++it;
    }
  }
  entries_ -= n;
  return n;
}

std::size_t SemanticIndex::entries() const {
  std::lock_guard lock(mu_);
  return entries_;
}

std::size_t SemanticIndex::partitions() const {
  std::lock_guard lock(mu_);
  return parts_.size();
}

}  // namespace sluice::cache
