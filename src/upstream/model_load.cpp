#include "upstream/model_load.hpp"

#include <boost/json/object.hpp>

namespace sluice::upstream {

void ModelLoad::answered(Sent s, std::uint64_t sig, bool ok, double ttft_ms) noexcept {
  if (s == Sent::none || !ok) return;
  sig_.store(sig, std::memory_order_relaxed);
  if (s == Sent::changed) changes_.fetch_add(1, std::memory_order_relaxed);
  if (ttft_ms < 0) return;
  if (s == Sent::same) {
    double old = usual_.load(std::memory_order_relaxed);
    double next;
    do {
      next = old > 0 ? 0.2 * ttft_ms + 0.8 * old : ttft_ms;
    } while (!usual_.compare_exchange_weak(old, next, std::memory_order_relaxed));
  } else if (s == Sent::changed) {
    const double usual = usual_.load(std::memory_order_relaxed);
    if (usual > 0 && ttft_ms > 2 * usual && ttft_ms - usual > 100) reloads_.fetch_add(1, std::memory_order_relaxed);
  }
}

std::uint64_t load_signature(const LoadValues& v) noexcept {
  // FNV-1a over the three values.
  std::uint64_t h = 1469598103934665603ull;
  for (const std::int64_t x : {v.num_ctx, v.num_gpu, v.num_batch}) {
    auto u = static_cast<std::uint64_t>(x);
    for (int i = 0; i < 8; ++i) {
      h ^= (u >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h == 0 ? 1 : h;
}

LoadValues load_values(const boost::json::object& body) noexcept {
  LoadValues v;
  const auto* o = body.if_contains("options");
  if (!o || !o->is_object()) return v;
  const auto& opts = o->get_object();
  auto read = [&](const char* k, std::int64_t& out) {
    const auto* x = opts.if_contains(k);
    if (!x) return;
    if (x->is_int64()) out = x->get_int64();
    else if (x->is_uint64()) out = static_cast<std::int64_t>(x->get_uint64());
    else if (x->is_double()) out = static_cast<std::int64_t>(x->get_double());
  };
  read("num_ctx", v.num_ctx);
  read("num_gpu", v.num_gpu);
  read("num_batch", v.num_batch);
  return v;
}

}  // namespace sluice::upstream
