#include "cache/semantic.hpp"

#include <hnswlib/hnswlib.h>

#include <bit>
#include <boost/json.hpp>
#include <condition_variable>
#include <deque>
#include <thread>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/text.hpp"
#include "common/thread_name.hpp"
#include "config/backend.hpp"
#include "llm/chat.hpp"

namespace sluice::cache {

namespace json = boost::json;

namespace {

std::uint64_t hash64(std::string_view s, std::uint64_t seed = 0) noexcept { return fmix64(fnv1a(s, kFnvBasis ^ seed)); }

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

std::uint64_t words_hash(std::string_view text) {
  std::string joined;
  for (const auto& w : words_of(text)) {
    joined += w;
    joined += ' ';
  }
  return hash64(joined, 7);
}

std::string semantic_text(const llm::ChatRequest& req, bool tools) {
  const json::object& body = req.body;
  if (!tools && (body.contains("tools") || body.contains("functions"))) return {};
  const auto* messages = body.if_contains("messages");
  if (!messages || !messages->is_array()) return {};
  std::string out;
  auto line = [&out](std::string_view who, std::string_view t) {
    if (!out.empty()) out += '\n';
    out += who;
    out += ": ";
    out += t;
  };
  for (const auto& m : messages->get_array()) {
    const auto* o = m.if_object();
    if (!o) return {};
    const auto* role = o->if_contains("role");
    if (!role || !role->is_string()) return {};
    const std::string_view r = role->get_string();
    const bool tool_part = r == "tool" || r == "function" || o->contains("tool_calls") || o->contains("function_call");
    if (tool_part && !tools) return {};
    // Who speaks: the role, and its name or the tool call it answers (two prompts that
    // differ only there are not the same question).
    std::string who(r);
    for (const char* k : {"name", "tool_call_id"}) {
      if (const auto* v = o->if_contains(k)) {
        if (!v->is_string()) return {};
        who += '(';
        who += v->get_string();
        who += ')';
      }
    }
    const auto* content = o->if_contains("content");
    if (content && content->is_string()) {
      line(who, content->get_string());
    } else if (content && content->is_array()) {
      for (const auto& part : content->get_array()) {
        const auto* p = part.if_object();
        const auto* type = p ? p->if_contains("type") : nullptr;
        const auto* text = p ? p->if_contains("text") : nullptr;
        // Only text: an image, audio or a file makes two prompts with the same words differ.
        if (!type || !type->is_string() || type->get_string() != "text" || !text || !text->is_string()) return {};
        line(who, text->get_string());
      }
    } else if (content && !content->is_null()) {
      return {};
    }
    // The calls themselves: their function and arguments, as sent.
    for (const char* k : {"tool_calls", "function_call"}) {
      if (const auto* calls = o->if_contains(k)) line(who + " call", json::serialize(*calls));
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
  if (!values || values->empty() || values->size() > kMaxDimensions) return std::nullopt;
  std::vector<float> out;
  out.reserve(values->size());
  for (const auto& x : *values) {
    if (!x.is_number()) return std::nullopt;
    const double d = x.to_number<double>();
    if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) return std::nullopt;
    out.push_back(static_cast<float>(d));
  }
  // The length of the floats kept (not of the doubles read: a subnormal rounds), scaled
  // to 1; a vector too small to scale is not one.
  double norm2 = 0;
  for (float x : out) norm2 += static_cast<double>(x) * static_cast<double>(x);
  if (!(norm2 >= 1e-30) || !std::isfinite(norm2)) return std::nullopt;
  const double inv = 1.0 / std::sqrt(norm2);
  for (float& x : out) x = static_cast<float>(x * inv);
  return out;
}

namespace {

std::string hex16(std::uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string o;
  for (int b = 60; b >= 0; b -= 4) o += kHex[v >> b & 0xF];
  return o;
}

bool unhex16(std::string_view v, std::uint64_t& out) {
  if (v.size() != 16) return false;
  out = 0;
  for (char c : v) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    out = out << 4 | static_cast<std::uint64_t>(d);
  }
  return true;
}

}  // namespace

std::vector<std::string> encode_fields(const Remembered& r) {
  std::string vec(r.vector.size() * sizeof(float), '\0');
  for (std::size_t i = 0; i < r.vector.size(); ++i) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(r.vector[i]);
    for (int k = 0; k < 4; ++k) vec[i * 4 + static_cast<std::size_t>(k)] = static_cast<char>(bits >> (8 * k) & 0xFF);
  }
  return {"r", r.route, "p", r.partition, "t", r.scope, "h", r.hash, "s", hex16(r.simhash), "w", hex16(r.words), "v", std::move(vec)};
}

std::optional<Remembered> decode_fields(std::span<const std::string> fv) {
  Remembered r;
  bool got[7] = {};
  for (std::size_t i = 0; i + 1 < fv.size(); i += 2) {
    const std::string& f = fv[i];
    const std::string& v = fv[i + 1];
    if (f == "r") r.route = v, got[0] = true;
    else if (f == "p") r.partition = v, got[1] = true;
    else if (f == "t") r.scope = v, got[2] = true;
    else if (f == "h") r.hash = v, got[3] = true;
    else if (f == "s") got[4] = unhex16(v, r.simhash);
    else if (f == "w") got[5] = unhex16(v, r.words);
    else if (f == "v") {
      if (v.size() % 4 != 0 || v.size() > kMaxDimensions * 4) return std::nullopt;
      r.vector.resize(v.size() / 4);
      for (std::size_t k = 0; k < r.vector.size(); ++k) {
        std::uint32_t bits = 0;
        for (int b = 0; b < 4; ++b) bits |= static_cast<std::uint32_t>(static_cast<unsigned char>(v[k * 4 + static_cast<std::size_t>(b)])) << (8 * b);
        r.vector[k] = std::bit_cast<float>(bits);
        if (!std::isfinite(r.vector[k])) return std::nullopt;
      }
      got[6] = true;
    }
  }
  for (bool g : got) {
    if (!g) return std::nullopt;
  }
  if (r.route.empty() || r.partition.size() != 64 || r.hash.size() != 64) return std::nullopt;
  return r;
}

// One partition: its entries in slots (a slot's number is its label in the HNSW graph),
// replaced oldest first once max_entries are held. Guarded by its own mutex.
struct SemanticIndex::Partition {
  struct Slot {
    std::string hash;
    std::uint64_t simhash = 0, words = 0;
    bool live = false;
    bool vector = false;  // in the graph (not marked deleted)
  };
  std::mutex mu;
  std::string route, scope;
  std::uint64_t used = 0;  // for the least recently used partition (SemanticIndex::mu_)
  std::vector<Slot> slots;
  std::size_t next = 0;  // the slot replaced next when full
  std::unordered_map<std::string, std::size_t> by_hash;
  std::size_t dim = 0;  // the vectors' length
  std::size_t capacity = 0;
  std::size_t vectors = 0;
  std::unique_ptr<hnswlib::InnerProductSpace> space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> graph;
  std::atomic<std::int64_t> bytes{0};  // estimated: slots, and the graph's vectors and links

  void unvector(std::size_t i) {
    if (!slots[i].vector) return;
    slots[i].vector = false;
    --vectors;
    try {
      graph->markDelete(i);
    } catch (const std::exception&) {
    }
  }
  std::int64_t estimate() const {
    // hnswlib: per element its vector, level-0 links (2 M = 32 ids), a label; per slot
    // its key and bookkeeping.
    return static_cast<std::int64_t>(capacity * (dim * sizeof(float) + 32 * 4 + 16) + slots.size() * 160);
  }
};

// The thread that makes insertions.
struct SemanticIndex::Worker {
  std::mutex mu;
  std::condition_variable cv, idle;
  std::deque<Remembered> queue;
  bool stop = false, busy = false;
  std::atomic<std::uint64_t> dropped{0};
  std::thread thread;
};

SemanticIndex::SemanticIndex(std::size_t max_entries, std::size_t max_partitions, std::size_t max_bytes)
    : max_entries_(std::max<std::size_t>(max_entries, 1)),
      max_partitions_(std::max<std::size_t>(max_partitions, 1)),
      max_bytes_(max_bytes),
      worker_(std::make_unique<Worker>()) {
  worker_->thread = std::thread([this] {
    name_this_thread("sluice-semantic");
    Worker& w = *worker_;
    std::unique_lock lock(w.mu);
    for (;;) {
      w.cv.wait(lock, [&w] { return w.stop || !w.queue.empty(); });
      if (w.queue.empty()) return;  // stop, nothing left
      Remembered r = std::move(w.queue.front());
      w.queue.pop_front();
      w.busy = true;
      lock.unlock();
      add(r);
      lock.lock();
      w.busy = false;
      if (w.queue.empty()) w.idle.notify_all();
    }
  });
}

SemanticIndex::~SemanticIndex() {
  {
    std::lock_guard lock(worker_->mu);
    worker_->stop = true;
    worker_->queue.clear();
  }
  worker_->cv.notify_all();
  worker_->thread.join();
}

void SemanticIndex::add_later(Remembered r) {
  {
    std::lock_guard lock(worker_->mu);
    if (worker_->queue.size() >= kMaxQueued) {
      worker_->dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    worker_->queue.push_back(std::move(r));
  }
  worker_->cv.notify_one();
}

void SemanticIndex::settle() {
  std::unique_lock lock(worker_->mu);
  worker_->idle.wait(lock, [this] { return worker_->queue.empty() && !worker_->busy; });
}

std::uint64_t SemanticIndex::dropped() const { return worker_->dropped.load(std::memory_order_relaxed); }

std::size_t SemanticIndex::queued() const {
  std::lock_guard lock(worker_->mu);
  return worker_->queue.size();
}

std::shared_ptr<SemanticIndex::Partition> SemanticIndex::find(const std::string& route, const std::string& partition) {
  std::lock_guard lock(mu_);
  auto it = parts_.find(route + '\n' + partition);
  if (it == parts_.end()) return nullptr;
  it->second->used = ++tick_;
  return it->second;
}

void SemanticIndex::evict_locked() {
  auto over = [this] {
    return parts_.size() > max_partitions_ ||
           (max_bytes_ != SIZE_MAX && bytes_.load(std::memory_order_relaxed) > static_cast<std::int64_t>(max_bytes_));
  };
  while (parts_.size() > 1 && over()) {
    // The scope (tenant) holding the most partitions gives up its least recently used.
    std::unordered_map<std::string_view, std::size_t> per_scope;
    for (const auto& [name, p] : parts_) ++per_scope[p->scope];
    std::string_view biggest;
    std::size_t most = 0;
    for (const auto& [scope, n] : per_scope) {
      if (n > most) most = n, biggest = scope;
    }
    auto lru = parts_.end();
    for (auto it = parts_.begin(); it != parts_.end(); ++it) {
      if (it->second->scope == biggest && (lru == parts_.end() || it->second->used < lru->second->used)) lru = it;
    }
    if (lru == parts_.end()) break;
    std::lock_guard plock(lru->second->mu);  // (mu_ then a partition's: the one order taken)
    entries_.fetch_sub(static_cast<std::int64_t>(lru->second->by_hash.size()), std::memory_order_relaxed);
    bytes_.fetch_sub(lru->second->bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
    parts_.erase(lru);
  }
}

std::optional<Match> SemanticIndex::by_simhash(const std::string& route, const std::string& partition, std::uint64_t h,
                                               std::uint64_t words, int max_distance, double threshold) {
  if (max_distance < 0) return std::nullopt;
  auto p = find(route, partition);
  if (!p) return std::nullopt;
  std::lock_guard lock(p->mu);
  // A scan: a popcount per entry (10,000 entries: a few µs), exact for any distance.
  int best = max_distance + 1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < p->slots.size(); ++i) {
    const auto& s = p->slots[i];
    if (!s.live) continue;
    if (max_distance == 0) {
      if (s.words == words) {
        best = 0;
        at = i;
        break;
      }
      continue;
    }
    const int d = hamming(s.simhash, h);
    if (d < best) {
      best = d;
      at = i;
      if (d == 0) break;
    }
  }
  if (best > max_distance) return std::nullopt;
  const double similarity = 1.0 - best / 64.0;
  if (max_distance > 0 && similarity < threshold) return std::nullopt;
  return Match{p->slots[at].hash, similarity, true};
}

std::optional<Match> SemanticIndex::nearest(const std::string& route, const std::string& partition,
                                            std::span<const float> v, double threshold) {
  auto p = find(route, partition);
  if (!p) return std::nullopt;
  std::lock_guard lock(p->mu);
  if (!p->graph || p->vectors == 0 || v.size() != p->dim) return std::nullopt;
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
    const double sim = std::min(1.0, 1.0 - static_cast<double>(dist));
    if (sim >= threshold && (!best || sim >= best->similarity)) best = Match{p->slots[label].hash, sim, false};
  }
  return best;
}

bool SemanticIndex::add(const Remembered& r) {
  std::shared_ptr<Partition> p;
  {
    std::lock_guard lock(mu_);
    const std::string name = r.route + '\n' + r.partition;
    auto it = parts_.find(name);
    if (it == parts_.end()) {
      p = std::make_shared<Partition>();
      p->route = r.route;
      p->scope = r.scope;
      p->used = ++tick_;
      parts_.emplace(name, p);
      evict_locked();
      if (!parts_.count(name)) return false;  // (evicted at once: nothing else to give up)
    } else {
      p = it->second;
    }
    p->used = ++tick_;
  }
  bool added = true;
  std::int64_t entries_delta = 0;
  {
    std::lock_guard lock(p->mu);
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
          --entries_delta;
        }
        p->unvector(at);
      }
      p->slots[at] = Partition::Slot{r.hash, r.simhash, r.words, true, false};
      p->by_hash.emplace(r.hash, at);
      ++entries_delta;
    }
    if (!r.vector.empty()) {
      if (p->graph && r.vector.size() != p->dim) {
        // Another embedding model: the old vectors cannot be compared with the new.
        for (auto& s : p->slots) s.vector = false;
        p->graph.reset();
        p->space.reset();
        p->vectors = 0;
        p->capacity = 0;
      }
      if (!p->graph) {
        p->dim = r.vector.size();
        p->capacity = std::min<std::size_t>(8, max_entries_);  // (doubled as it fills: a partition of one prompt stays small)
        p->space = std::make_unique<hnswlib::InnerProductSpace>(p->dim);
        p->graph = std::make_unique<hnswlib::HierarchicalNSW<float>>(p->space.get(), p->capacity, 16, 100);
        p->graph->setEf(64);
      }
      try {
        if (at >= p->capacity) {
          p->capacity = std::min(max_entries_, std::max(p->capacity * 2, at + 1));
          p->graph->resizeIndex(p->capacity);
        }
        p->graph->addPoint(r.vector.data(), at);  // (a label seen before: updated, undeleted)
        p->slots[at].vector = true;
        ++p->vectors;
      } catch (const std::exception&) {
        added = false;
      }
    }
  }
  const std::int64_t now_bytes = [&] {
    std::lock_guard plock(p->mu);
    return p->estimate();
  }();
  std::lock_guard lock(mu_);
  const auto it = parts_.find(r.route + '\n' + r.partition);
  if (it == parts_.end() || it->second != p) return added;  // evicted meanwhile: counted out already
  entries_.fetch_add(entries_delta, std::memory_order_relaxed);
  bytes_.fetch_add(now_bytes - p->bytes.exchange(now_bytes), std::memory_order_relaxed);
  if (max_bytes_ != SIZE_MAX && bytes_.load(std::memory_order_relaxed) > static_cast<std::int64_t>(max_bytes_)) {
    evict_locked();
  }
  return added;
}

void SemanticIndex::forget(const std::string& route, const std::string& partition, const std::string& hash) {
  std::vector<std::shared_ptr<Partition>> where;
  {
    std::lock_guard lock(mu_);
    if (!partition.empty()) {
      if (auto it = parts_.find(route + '\n' + partition); it != parts_.end()) where.push_back(it->second);
    } else {
      for (auto& [name, p] : parts_) {
        if (route.empty() || p->route == route) where.push_back(p);
      }
    }
  }
  for (auto& p : where) {
    std::lock_guard lock(p->mu);
    auto it = p->by_hash.find(hash);
    if (it == p->by_hash.end()) continue;
    const std::size_t at = it->second;
    p->by_hash.erase(it);
    p->slots[at].live = false;
    p->unvector(at);
    entries_.fetch_sub(1, std::memory_order_relaxed);
  }
}

std::size_t SemanticIndex::drop(const std::string& route) {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (auto it = parts_.begin(); it != parts_.end();) {
    if (route.empty() || it->second->route == route) {
      std::lock_guard plock(it->second->mu);
      n += it->second->by_hash.size();
      bytes_.fetch_sub(it->second->bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
      it = parts_.erase(it);
    } else {
      ++it;
    }
  }
  entries_.fetch_sub(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  return n;
}

std::size_t SemanticIndex::entries() const {
  return static_cast<std::size_t>(std::max<std::int64_t>(entries_.load(std::memory_order_relaxed), 0));
}

std::size_t SemanticIndex::partitions() const {
  std::lock_guard lock(mu_);
  return parts_.size();
}

std::size_t SemanticIndex::bytes() const {
  return static_cast<std::size_t>(std::max<std::int64_t>(bytes_.load(std::memory_order_relaxed), 0));
}

}  // namespace sluice::cache
