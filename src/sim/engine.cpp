#include "sim/engine.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace sluice::sim {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

std::string_view to_string(FaultKind k) noexcept {
  switch (k) {
    case FaultKind::none: return "none";
    case FaultKind::error_429: return "error-429";
    case FaultKind::error_500: return "error-500";
    case FaultKind::error_503: return "error-503";
    case FaultKind::abort: return "abort";
    case FaultKind::hang: return "hang";
  }
  return "none";
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_i64(std::string_view s, std::int64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

bool parse_fault_header(std::string_view value, Fault& out, std::string& error) {
  Fault f;
  bool any = false;
  while (true) {
    const auto comma = value.find(',');
    std::string_view item = trim(value.substr(0, comma));
    if (!item.empty()) {
      any = true;
      std::string_view key = item, arg;
      if (auto eq = item.find('='); eq != std::string_view::npos) {
        key = trim(item.substr(0, eq));
        arg = trim(item.substr(eq + 1));
      }
      auto set_kind = [&](FaultKind k) {
        if (f.kind != FaultKind::none && f.kind != k) {
          error = "x-sim-fault: conflicting faults";
          return false;
        }
        f.kind = k;
        return true;
      };
      std::int64_t n = 0;
      if (key == "error-429" && arg.empty()) {
        if (!set_kind(FaultKind::error_429)) return false;
      } else if (key == "error-500" && arg.empty()) {
        if (!set_kind(FaultKind::error_500)) return false;
      } else if (key == "error-503" && arg.empty()) {
        if (!set_kind(FaultKind::error_503)) return false;
      } else if (key == "hang" && arg.empty()) {
        if (!set_kind(FaultKind::hang)) return false;
      } else if (key == "none" && arg.empty()) {
        // explicit "no fault": disables the random faults for this request
      } else if (key == "abort-after" && parse_i64(arg, n) && n >= 0) {
        if (!set_kind(FaultKind::abort)) return false;
        f.abort_after = n;
      } else if (key == "slow-first-token" && parse_i64(arg, n) && n >= 0) {
        f.slow_first_token = milliseconds(n);
      } else {
        error = "x-sim-fault: unknown or malformed value '" + std::string(item) + "'";
        return false;
      }
    }
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  if (!any) {
    error = "x-sim-fault: empty value";
    return false;
  }
  out = f;
  return true;
}

std::string validate(const config::SimSettings& s) {
  auto rate_ok = [](double r) { return std::isfinite(r) && r >= 0.0 && r <= 1.0; };
  if (s.ttft.count() < 0) return "ttft_ms must be >= 0";
  if (!std::isfinite(s.ttft_per_prompt_token_ms) || s.ttft_per_prompt_token_ms < 0)
    return "ttft_per_prompt_token_ms must be >= 0";
  if (s.inter_token.count() < 0) return "inter_token_ms must be >= 0";
  if (!rate_ok(s.jitter)) return "jitter must be in [0,1]";
  if (s.max_in_flight < 1) return "max_in_flight must be >= 1";
  if (s.max_waiting < 0) return "max_waiting must be >= 0";
  if (s.kv_tokens < 0) return "kv_tokens must be >= 0";
  if (s.default_output_tokens < 0) return "default_output_tokens must be >= 0";
  if (s.max_output_tokens < 0) return "max_output_tokens must be >= 0";
  if (!rate_ok(s.error_rate_429)) return "error_rate_429 must be in [0,1]";
  if (!rate_ok(s.error_rate_500)) return "error_rate_500 must be in [0,1]";
  if (!rate_ok(s.error_rate_503)) return "error_rate_503 must be in [0,1]";
  if (!rate_ok(s.abort_rate)) return "abort_rate must be in [0,1]";
  if (!rate_ok(s.hang_rate)) return "hang_rate must be in [0,1]";
  if (!rate_ok(s.slow_first_token_rate)) return "slow_first_token_rate must be in [0,1]";
  if (s.slow_first_token.count() < 0) return "slow_first_token_ms must be >= 0";
  if (s.load_time.count() < 0) return "load_time_ms must be >= 0";
  if (s.layers < 1) return "layers must be >= 1";
  auto nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  if (!nonneg(s.cpu_layer_cost) || s.cpu_layer_cost < 1) return "cpu_layer_cost must be >= 1";
  if (!nonneg(s.split_cost)) return "split_cost must be >= 0";
  if (!nonneg(s.weights_mib)) return "weights_mib must be >= 0";
  if (!nonneg(s.kv_kib_per_token)) return "kv_kib_per_token must be >= 0";
  if (!nonneg(s.batch_kib)) return "batch_kib must be >= 0";
  const double sum =
      s.error_rate_429 + s.error_rate_500 + s.error_rate_503 + s.abort_rate + s.hang_rate;
  if (sum > 1.0 + 1e-9) return "error_rate_429 + error_rate_500 + error_rate_503 + abort_rate + hang_rate must be <= 1";
  return {};
}

std::string settings_json(const config::SimSettings& s) {
  json::object o;
  o["ttft_ms"] = s.ttft.count();
  o["ttft_per_prompt_token_ms"] = s.ttft_per_prompt_token_ms;
  o["inter_token_ms"] = s.inter_token.count();
  o["jitter"] = s.jitter;
  o["max_in_flight"] = s.max_in_flight;
  o["max_waiting"] = s.max_waiting;
  o["kv_tokens"] = s.kv_tokens;
  o["default_output_tokens"] = s.default_output_tokens;
  o["max_output_tokens"] = s.max_output_tokens;
  o["error_rate_429"] = s.error_rate_429;
  o["error_rate_500"] = s.error_rate_500;
  o["error_rate_503"] = s.error_rate_503;
  o["abort_rate"] = s.abort_rate;
  o["hang_rate"] = s.hang_rate;
  o["slow_first_token_rate"] = s.slow_first_token_rate;
  o["slow_first_token_ms"] = s.slow_first_token.count();
  o["seed"] = s.seed;
  o["load_time_ms"] = s.load_time.count();
  o["layers"] = s.layers;
  o["cpu_layer_cost"] = s.cpu_layer_cost;
  o["split_cost"] = s.split_cost;
  o["weights_mib"] = s.weights_mib;
  o["kv_kib_per_token"] = s.kv_kib_per_token;
  o["batch_kib"] = s.batch_kib;
  return json::serialize(o);
}

namespace {

bool json_number(const json::value& v, double& out) {
  if (v.is_int64()) out = static_cast<double>(v.get_int64());
  else if (v.is_uint64()) out = static_cast<double>(v.get_uint64());
  else if (v.is_double()) out = v.get_double();
  else return false;
  return std::isfinite(out);
}

}  // namespace

bool apply_settings_json(std::string_view text, config::SimSettings& s, std::string& error) {
  json::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) {
    error = "body is not valid JSON: " + ec.message();
    return false;
  }
  if (!v.is_object()) {
    error = "body must be a JSON object";
    return false;
  }
  config::SimSettings n = s;
  for (const auto& kv : v.as_object()) {
    const std::string_view key = kv.key();
    double d = 0;
    if (!json_number(kv.value(), d)) {
      error = std::string(key) + " must be a number";
      return false;
    }
    auto integer = [&](auto& field, double min) {
      if (d != std::floor(d) || d < min || d > 2147483647.0) {
        error = std::string(key) + " must be an integer >= " + std::to_string(static_cast<long long>(min));
        return false;
      }
      field = static_cast<std::remove_reference_t<decltype(field)>>(d);
      return true;
    };
    auto millis = [&](milliseconds& field) {
      if (d < 0 || d > 1e12) {
        error = std::string(key) + " must be >= 0";
        return false;
      }
      field = milliseconds(static_cast<std::int64_t>(std::llround(d)));
      return true;
    };
    bool ok = true;
    if (key == "ttft_ms") ok = millis(n.ttft);
    else if (key == "ttft_per_prompt_token_ms") n.ttft_per_prompt_token_ms = d;
    else if (key == "inter_token_ms") ok = millis(n.inter_token);
    else if (key == "jitter") n.jitter = d;
    else if (key == "max_in_flight") ok = integer(n.max_in_flight, 1);
    else if (key == "max_waiting") ok = integer(n.max_waiting, 0);
    else if (key == "kv_tokens") {
      if (d < 0 || d > 1e12) {
        error = "kv_tokens must be >= 0";
        ok = false;
      } else {
        n.kv_tokens = static_cast<std::int64_t>(d);
      }
    }
    else if (key == "default_output_tokens") ok = integer(n.default_output_tokens, 0);
    else if (key == "max_output_tokens") ok = integer(n.max_output_tokens, 0);
    else if (key == "error_rate_429") n.error_rate_429 = d;
    else if (key == "error_rate_500") n.error_rate_500 = d;
    else if (key == "error_rate_503") n.error_rate_503 = d;
    else if (key == "abort_rate") n.abort_rate = d;
    else if (key == "hang_rate") n.hang_rate = d;
    else if (key == "slow_first_token_rate") n.slow_first_token_rate = d;
    else if (key == "slow_first_token_ms") ok = millis(n.slow_first_token);
    else if (key == "load_time_ms") ok = millis(n.load_time);
    else if (key == "layers") ok = integer(n.layers, 1);
    else if (key == "cpu_layer_cost") n.cpu_layer_cost = d;
    else if (key == "split_cost") n.split_cost = d;
    else if (key == "weights_mib") n.weights_mib = d;
    else if (key == "kv_kib_per_token") n.kv_kib_per_token = d;
    else if (key == "batch_kib") n.batch_kib = d;
    else if (key == "seed") {
      if (d < 0 || d != std::floor(d) || !(kv.value().is_int64() || kv.value().is_uint64())) {
        error = "seed must be an integer >= 0";
        return false;
      }
      n.seed = kv.value().is_uint64() ? kv.value().get_uint64()
                                      : static_cast<std::uint64_t>(kv.value().get_int64());
    } else {
      error = "unknown setting '" + std::string(key) + "'";
      return false;
    }
    if (!ok) return false;
  }
  if (auto msg = validate(n); !msg.empty()) {
    error = msg;
    return false;
  }
  s = n;
  return true;
}

bool parse_duration(std::string_view t, milliseconds& out) noexcept {
  t = trim(t);
  if (t.empty()) return false;
  std::size_t i = 0;
  while (i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.')) ++i;
  const std::string_view num = t.substr(0, i), unit = t.substr(i);
  if (num.empty() || num == ".") return false;
  double v = 0;
  auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ec != std::errc() || p != num.data() + num.size() || !std::isfinite(v)) return false;
  double ms = 0;
  if (unit.empty() || unit == "ms") {
    if (unit.empty() && num.find('.') != std::string_view::npos) return false;  // integer ms
    ms = v;
  } else if (unit == "s") {
    ms = v * 1000.0;
  } else if (unit == "us") {
    ms = v / 1000.0;
  } else if (unit == "m") {
    ms = v * 60000.0;
  } else {
    return false;
  }
  if (ms > 1e12) return false;
  out = milliseconds(static_cast<std::int64_t>(std::llround(ms)));
  return true;
}

std::int64_t estimate_prompt_tokens(std::size_t content_bytes) noexcept {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(content_bytes / 4));
}

OutputPlan plan_output(std::optional<std::int64_t> requested, const config::SimSettings& s) noexcept {
  const std::int64_t cap = std::max(0, s.max_output_tokens);
  OutputPlan p;
  if (requested) {
    const std::int64_t want = std::max<std::int64_t>(0, *requested);
    p.tokens = std::min(want, cap);
    p.length_limited = true;
  } else {
    const std::int64_t want = std::max(0, s.default_output_tokens);
    p.tokens = std::min(want, cap);
    p.length_limited = want > cap;
  }
  return p;
}

// ---------------------------------------------------------------------------------------
// Engine

// A queued acquire(). `granted` is written under Engine::mu_; the channel (thread-safe)
// wakes the waiting coroutine on its own executor.
struct Engine::Waiter {
  explicit Waiter(const asio::any_io_executor& ex, std::int64_t k) : wake(ex, 1), kv(k) {}
  asio::experimental::concurrent_channel<void(boost::system::error_code)> wake;
  bool granted = false;
  std::int64_t kv = 0;
};

Engine::Engine(config::SimSettings settings) : settings_(settings) {
  if (auto msg = validate(settings_); !msg.empty()) throw std::invalid_argument(msg);
  reseed_locked(settings_.seed);
}

Engine::~Engine() = default;

void Engine::reseed_locked(std::uint64_t seed) {
  if (seed == 0) {
    std::random_device rd;
    seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  rng_.seed(seed);
}

config::SimSettings Engine::settings() const {
  std::lock_guard lk(mu_);
  return settings_;
}

void Engine::set_settings(const config::SimSettings& s) {
  if (auto msg = validate(s); !msg.empty()) throw std::invalid_argument(msg);
  std::lock_guard lk(mu_);
  const bool reseed = s.seed != 0 && s.seed != settings_.seed;
  settings_ = s;
  if (reseed) reseed_locked(s.seed);
  grant_locked();
}

bool Engine::update_settings(std::string_view text, std::string& error) {
  std::lock_guard lk(mu_);
  config::SimSettings n = settings_;
  if (!apply_settings_json(text, n, error)) return false;
  const bool reseed = n.seed != 0 && n.seed != settings_.seed;
  settings_ = n;
  if (reseed) reseed_locked(n.seed);
  grant_locked();
  return true;
}

Fault Engine::choose_fault(const config::SimSettings& s) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::lock_guard lk(mu_);
  Fault f;
  const double x = u(rng_);
  double edge = 0;
  const std::pair<double, FaultKind> table[] = {
      {s.error_rate_429, FaultKind::error_429}, {s.error_rate_500, FaultKind::error_500},
      {s.error_rate_503, FaultKind::error_503}, {s.abort_rate, FaultKind::abort},
      {s.hang_rate, FaultKind::hang}};
  for (const auto& [rate, kind] : table) {
    edge += rate;
    if (rate > 0 && x < edge) {
      f.kind = kind;
      break;
    }
  }
  if (s.slow_first_token_rate > 0 && u(rng_) < s.slow_first_token_rate)
    f.slow_first_token = s.slow_first_token;
  return f;
}

nanoseconds Engine::jittered(nanoseconds d, double jitter) {
  if (jitter <= 0 || d.count() <= 0) return std::max(d, nanoseconds(0));
  std::uniform_real_distribution<double> u(-jitter, jitter);
  double f;
  {
    std::lock_guard lk(mu_);
    f = 1.0 + u(rng_);
  }
  return nanoseconds(std::max<std::int64_t>(0, std::llround(static_cast<double>(d.count()) * f)));
}

Engine::Slot& Engine::Slot::operator=(Slot&& o) noexcept {
  if (this != &o) {
    release();
    engine_ = o.engine_;
    kv_ = o.kv_;
    o.engine_ = nullptr;
  }
  return *this;
}

void Engine::Slot::release() noexcept {
  if (engine_) {
    Engine* e = engine_;
    engine_ = nullptr;
    e->release_slot(kv_);
  }
}

void Engine::release_slot(std::int64_t kv) noexcept {
  std::lock_guard lk(mu_);
  --in_flight_;
  kv_used_ -= kv;
  grant_locked();
}

// A slot is free, and (with a KV cache modelled) room for the sequence's tokens, or no
// sequence at all (one larger than the cache runs alone).
bool Engine::fits_locked(std::int64_t kv) const noexcept {
  if (in_flight_ >= settings_.max_in_flight) return false;
  return settings_.kv_tokens <= 0 || kv_used_ == 0 || kv_used_ + kv <= settings_.kv_tokens;
}

void Engine::grant_locked() {
  while (!queue_.empty() && fits_locked(queue_.front()->kv)) {
    auto w = std::move(queue_.front());
    queue_.pop_front();
    ++in_flight_;
    kv_used_ += w->kv;
    w->granted = true;
    // Buffered channel of size 1, one send per waiter: never blocks, never fails while
    // the channel is open. The receiver resumes on its own executor.
    w->wake.try_send(boost::system::error_code{});
  }
}

asio::awaitable<std::optional<Engine::Slot>> Engine::acquire(std::int64_t kv) {
  const auto ex = co_await asio::this_coro::executor;
  std::shared_ptr<Waiter> w;
  {
    std::lock_guard lk(mu_);
    if (queue_.empty() && fits_locked(kv)) {
      ++in_flight_;
      kv_used_ += kv;
      co_return std::optional<Slot>(std::in_place, this, kv);
    }
    if (static_cast<std::int64_t>(queue_.size()) >= settings_.max_waiting) co_return std::nullopt;
    w = std::make_shared<Waiter>(ex, kv);
    queue_.push_back(w);
  }
  // Runs on every exit that did not hand the slot to the caller: an exception (the
  // cancellation of a `||` race) or the destruction of the suspended coroutine frame
  // (its io_context going away). Either leaves the queue or gives back a granted slot.
  struct Guard {
    Engine* e;
    std::shared_ptr<Waiter>& w;
    bool committed = false;
    ~Guard() {
      if (committed) return;
      std::lock_guard lk(e->mu_);
      if (w->granted) {
        --e->in_flight_;
        e->kv_used_ -= w->kv;
        e->grant_locked();
      } else {
        auto it = std::find(e->queue_.begin(), e->queue_.end(), w);
        if (it != e->queue_.end()) e->queue_.erase(it);
      }
    }
  } guard{this, w};

  while (true) {
    auto [ec] = co_await w->wake.async_receive(asio::as_tuple(asio::use_awaitable));
    {
      std::lock_guard lk(mu_);
      if (w->granted) {
        guard.committed = true;
        co_return std::optional<Slot>(std::in_place, this, kv);
      }
    }
    if (ec) throw boost::system::system_error(ec);  // cancelled while queued
  }
}

void Engine::count(Counter c) noexcept {
  std::lock_guard lk(mu_);
  switch (c) {
    case Counter::requests: ++counters_.requests; break;
    case Counter::responses: ++counters_.responses; break;
    case Counter::embeddings: ++counters_.embeddings; break;
    case Counter::moderations: ++counters_.moderations; break;
    case Counter::completed: ++counters_.completed; break;
    case Counter::cancelled: ++counters_.cancelled; break;
    case Counter::errors_429: ++counters_.errors_429; break;
    case Counter::errors_500: ++counters_.errors_500; break;
    case Counter::errors_503: ++counters_.errors_503; break;
    case Counter::aborted: ++counters_.aborted; break;
    case Counter::hung: ++counters_.hung; break;
    case Counter::rejected_queue_full: ++counters_.rejected_queue_full; break;
  }
}

Stats Engine::stats() const {
  std::lock_guard lk(mu_);
  Stats s = counters_;
  s.in_flight = in_flight_;
  s.waiting = static_cast<std::int64_t>(queue_.size());
  s.kv_used = kv_used_;
  s.kv_tokens = settings_.kv_tokens;
  return s;
}

void Engine::reset_stats() {
  std::lock_guard lk(mu_);
  counters_ = Stats{};
}

double gpu_share(const LoadOptions& o, const config::SimSettings& s) noexcept {
  if (o.num_gpu < 0 || o.num_gpu >= s.layers) return 1.0;
  return static_cast<double>(o.num_gpu) / static_cast<double>(s.layers);
}

double compute_factor(const LoadOptions& o, const config::SimSettings& s) noexcept {
  const double g = gpu_share(o, s);
  const double f = g + (1.0 - g) * s.cpu_layer_cost;
  return g > 0.0 && g < 1.0 ? f * (1.0 + s.split_cost) : f;
}

ModelMemory model_memory(const LoadOptions& o, const config::SimSettings& s) noexcept {
  const double bytes = s.weights_mib * 1048576.0 + s.kv_kib_per_token * 1024.0 * static_cast<double>(o.num_ctx) +
                       s.batch_kib * 1024.0 * static_cast<double>(o.num_batch);
  return {static_cast<std::int64_t>(bytes), static_cast<std::int64_t>(bytes * gpu_share(o, s))};
}

std::chrono::steady_clock::time_point Engine::ready_at(const std::string& model, const LoadOptions& o) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  auto it = models_.find(model);
  if (settings_.load_time.count() <= 0) {
    // Not modelled: always loaded (with the options last asked for, for /api/ps).
    if (it == models_.end()) models_.emplace(model, Model{o, now});
    else it->second.options = o;
    return now;
  }
  if (it != models_.end() && it->second.options == o) return std::max(now, it->second.ready);
  // A load: after the one in progress, if any (Ollama waits for it).
  const auto start = it != models_.end() ? std::max(now, it->second.ready) : now;
  const auto ready = start + settings_.load_time;
  if (it == models_.end()) models_.emplace(model, Model{o, ready});
  else it->second = Model{o, ready};
  ++counters_.loads;
  return ready;
}

void Engine::unload(const std::string& model) {
  std::lock_guard lock(mu_);
  models_.erase(model);
}

std::vector<LoadedModel> Engine::loaded() const {
  std::lock_guard lock(mu_);
  std::vector<LoadedModel> out;
  for (const auto& [name, m] : models_) out.push_back({name, m.options, model_memory(m.options, settings_)});
  return out;
}

std::string stats_json(const Stats& s) {
  json::object o;
  o["requests"] = s.requests;
  o["responses"] = s.responses;
  o["embeddings"] = s.embeddings;
  o["moderations"] = s.moderations;
  o["completed"] = s.completed;
  o["cancelled"] = s.cancelled;
  o["errors_429"] = s.errors_429;
  o["errors_500"] = s.errors_500;
  o["errors_503"] = s.errors_503;
  o["aborted"] = s.aborted;
  o["hung"] = s.hung;
  o["kv_used"] = s.kv_used;
  o["rejected_queue_full"] = s.rejected_queue_full;
  o["loads"] = s.loads;
  o["in_flight"] = s.in_flight;
  o["waiting"] = s.waiting;
  return json::serialize(o);
}

}  // namespace sluice::sim
