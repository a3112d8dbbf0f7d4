#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "sim/engine.hpp"

using namespace sluice;
using namespace sluice::sim;
namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

config::SimSettings quiet() {
  config::SimSettings s;
  s.jitter = 0;
  s.seed = 42;
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Fault header

TEST(FaultHeader, ParsesEachKind) {
  Fault f;
  std::string err;
  ASSERT_TRUE(parse_fault_header("error-429", f, err));
  EXPECT_EQ(f.kind, FaultKind::error_429);
  ASSERT_TRUE(parse_fault_header("error-500", f, err));
  EXPECT_EQ(f.kind, FaultKind::error_500);
  ASSERT_TRUE(parse_fault_header(" error-503 ", f, err));
  EXPECT_EQ(f.kind, FaultKind::error_503);
  ASSERT_TRUE(parse_fault_header("hang", f, err));
  EXPECT_EQ(f.kind, FaultKind::hang);
  ASSERT_TRUE(parse_fault_header("abort-after=7", f, err));
  EXPECT_EQ(f.kind, FaultKind::abort);
  EXPECT_EQ(f.abort_after, 7);
  ASSERT_TRUE(parse_fault_header("slow-first-token=1500", f, err));
  EXPECT_EQ(f.kind, FaultKind::none);
  EXPECT_EQ(f.slow_first_token, 1500ms);
  ASSERT_TRUE(parse_fault_header("none", f, err));
  EXPECT_EQ(f.kind, FaultKind::none);
  EXPECT_EQ(f.slow_first_token, 0ms);
}

TEST(FaultHeader, CombinesSlowFirstTokenWithAKind) {
  Fault f;
  std::string err;
  ASSERT_TRUE(parse_fault_header("slow-first-token=20, abort-after=3", f, err));
  EXPECT_EQ(f.kind, FaultKind::abort);
  EXPECT_EQ(f.abort_after, 3);
  EXPECT_EQ(f.slow_first_token, 20ms);
}

TEST(FaultHeader, RejectsMalformedValues) {
  std::string err;
  for (const char* bad : {"", "error-418", "abort-after", "abort-after=x", "abort-after=-1",
                          "slow-first-token=", "hang=1", "error-429,error-500", "HANG"}) {
    Fault f;
    f.kind = FaultKind::hang;  // must stay untouched on error
    EXPECT_FALSE(parse_fault_header(bad, f, err)) << bad;
    EXPECT_EQ(f.kind, FaultKind::hang) << bad;
    EXPECT_FALSE(err.empty()) << bad;
  }
}

// ---------------------------------------------------------------------------------------
// Output length, prompt estimate, durations, token text

TEST(OutputPlan, RequestLimitCappedAndDefault) {
  config::SimSettings s;
  s.default_output_tokens = 32;
  s.max_output_tokens = 100;

  auto p = plan_output(std::nullopt, s);
  EXPECT_EQ(p.tokens, 32);
  EXPECT_FALSE(p.length_limited);

  p = plan_output(5, s);
  EXPECT_EQ(p.tokens, 5);
  EXPECT_TRUE(p.length_limited);

  p = plan_output(1000, s);
  EXPECT_EQ(p.tokens, 100);
  EXPECT_TRUE(p.length_limited);

  s.default_output_tokens = 500;  // default above the cap: cut by the cap
  p = plan_output(std::nullopt, s);
  EXPECT_EQ(p.tokens, 100);
  EXPECT_TRUE(p.length_limited);

  p = plan_output(0, s);
  EXPECT_EQ(p.tokens, 0);
}

TEST(PromptTokens, BytesOverFourMinOne) {
  EXPECT_EQ(estimate_prompt_tokens(0), 1);
  EXPECT_EQ(estimate_prompt_tokens(3), 1);
  EXPECT_EQ(estimate_prompt_tokens(8), 2);
  EXPECT_EQ(estimate_prompt_tokens(4001), 1000);
}

TEST(Duration, ParsesUnitsAndIntegerMillis) {
  std::chrono::milliseconds d{};
  ASSERT_TRUE(parse_duration("250ms", d));
  EXPECT_EQ(d, 250ms);
  ASSERT_TRUE(parse_duration("2s", d));
  EXPECT_EQ(d, 2000ms);
  ASSERT_TRUE(parse_duration("1.5s", d));
  EXPECT_EQ(d, 1500ms);
  ASSERT_TRUE(parse_duration("40", d));
  EXPECT_EQ(d, 40ms);
  ASSERT_TRUE(parse_duration("0", d));
  EXPECT_EQ(d, 0ms);
  ASSERT_TRUE(parse_duration("2000us", d));
  EXPECT_EQ(d, 2ms);
  for (const char* bad : {"", "ms", "-5", "1.5", "10h", "abc", "5 s"}) {
    EXPECT_FALSE(parse_duration(bad, d)) << bad;
  }
}

// ---------------------------------------------------------------------------------------
// Settings

TEST(Settings, JsonRoundTripAndValidation) {
  config::SimSettings s;
  std::string err;
  ASSERT_TRUE(apply_settings_json(
      R"({"ttft_ms":5,"inter_token_ms":7.4,"max_in_flight":3,"error_rate_429":0.25,"slow_first_token_ms":900,"seed":9})",
      s, err))
      << err;
  EXPECT_EQ(s.ttft, 5ms);
  EXPECT_EQ(s.inter_token, 7ms);
  EXPECT_EQ(s.max_in_flight, 3);
  EXPECT_DOUBLE_EQ(s.error_rate_429, 0.25);
  EXPECT_EQ(s.slow_first_token, 900ms);
  EXPECT_EQ(s.seed, 9u);

  auto v = boost::json::parse(settings_json(s)).as_object();
  EXPECT_EQ(v.at("ttft_ms").as_int64(), 5);
  EXPECT_EQ(v.at("max_in_flight").as_int64(), 3);
  EXPECT_EQ(v.size(), 24u);  // every setting, the load model's included
  ASSERT_TRUE(apply_settings_json(R"({"load_time_ms":2100,"layers":32,"cpu_layer_cost":3,"kv_kib_per_token":16})", s, err)) << err;
  EXPECT_EQ(s.load_time, 2100ms);
  EXPECT_EQ(s.layers, 32);
  EXPECT_EQ(boost::json::parse(settings_json(s)).as_object().at("load_time_ms").as_int64(), 2100);

  const config::SimSettings before = s;
  for (const char* bad : {R"({"nope":1})", R"({"max_in_flight":0})", R"({"max_in_flight":1.5})",
                          R"({"jitter":2})", R"({"error_rate_500":-0.1})", R"({"ttft_ms":"5"})",
                          R"({"error_rate_429":0.6,"hang_rate":0.6})", R"([1])", "not json",
                          R"({"ttft_ms":1,"max_waiting":-1})", R"({"ttft_ms":1,"layers":0})",
                          R"({"ttft_ms":1,"cpu_layer_cost":0.5})", R"({"ttft_ms":1,"load_time_ms":-1})"}) {
    EXPECT_FALSE(apply_settings_json(bad, s, err)) << bad;
    EXPECT_EQ(s.ttft, before.ttft) << bad;  // all or nothing
  }
}

TEST(Settings, EngineRejectsInvalid) {
  config::SimSettings s;
  s.max_in_flight = 0;
  EXPECT_THROW(Engine{s}, std::invalid_argument);
}

// ---------------------------------------------------------------------------------------
// Random faults and jitter

TEST(ChooseFault, RatesOfZeroAndOne) {
  Engine e(quiet());
  config::SimSettings s = quiet();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(e.choose_fault(s).kind, FaultKind::none);
  s.hang_rate = 1.0;
  s.slow_first_token_rate = 1.0;
  s.slow_first_token = 77ms;
  for (int i = 0; i < 100; ++i) {
    auto f = e.choose_fault(s);
    EXPECT_EQ(f.kind, FaultKind::hang);
    EXPECT_EQ(f.slow_first_token, 77ms);
  }
}

TEST(ChooseFault, RoughProportionsAndSeedDeterminism) {
  config::SimSettings s = quiet();
  s.error_rate_429 = 0.2;
  s.error_rate_500 = 0.1;
  s.abort_rate = 0.3;
  Engine a(s), b(s);
  int n429 = 0, n500 = 0, nabort = 0, nnone = 0;
  for (int i = 0; i < 10000; ++i) {
    auto fa = a.choose_fault(s);
    auto fb = b.choose_fault(s);
    ASSERT_EQ(fa.kind, fb.kind);  // same seed, same sequence
    switch (fa.kind) {
      case FaultKind::error_429: ++n429; break;
      case FaultKind::error_500: ++n500; break;
      case FaultKind::abort: ++nabort; break;
      case FaultKind::none: ++nnone; break;
      default: ADD_FAILURE() << to_string(fa.kind);
    }
  }
  EXPECT_NEAR(n429, 2000, 300);
  EXPECT_NEAR(n500, 1000, 250);
  EXPECT_NEAR(nabort, 3000, 350);
  EXPECT_NEAR(nnone, 4000, 350);
}

TEST(Jitter, StaysWithinBounds) {
  Engine e(quiet());
  const auto base = std::chrono::nanoseconds(1'000'000);
  EXPECT_EQ(e.jittered(base, 0.0), base);
  bool saw_low = false, saw_high = false;
  for (int i = 0; i < 2000; ++i) {
    auto d = e.jittered(base, 0.5);
    EXPECT_GE(d.count(), 500'000);
    EXPECT_LE(d.count(), 1'500'000);
    saw_low |= d.count() < 900'000;
    saw_high |= d.count() > 1'100'000;
  }
  EXPECT_TRUE(saw_low);
  EXPECT_TRUE(saw_high);
}

// ---------------------------------------------------------------------------------------
// Slots and the wait queue

TEST(Slots, SecondRequestWaitsUntilTheFirstReleases) {
  config::SimSettings s = quiet();
  s.max_in_flight = 1;
  Engine e(s);
  asio::io_context ioc;
  std::vector<std::string> log;
  std::optional<Engine::Slot> held;

  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
    auto slot = co_await e.acquire();
    log.push_back(slot ? "A got" : "A rejected");
    held = std::move(slot);
  }, asio::detached);
  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
    auto slot = co_await e.acquire();
    log.push_back(slot ? "B got" : "B rejected");
  }, asio::detached);

  ioc.poll();
  ASSERT_EQ(log, (std::vector<std::string>{"A got"}));
  EXPECT_EQ(e.stats().in_flight, 1);
  EXPECT_EQ(e.stats().waiting, 1);

  // Nothing moves while A holds its slot.
  ioc.restart();
  ioc.poll();
  EXPECT_EQ(log.size(), 1u);

  held.reset();  // A releases -> B is granted and resumed on its executor
  ioc.restart();
  ioc.poll();
  ASSERT_EQ(log, (std::vector<std::string>{"A got", "B got"}));
  // B's coroutine ended, so its slot went back too.
  EXPECT_EQ(e.stats().in_flight, 0);
  EXPECT_EQ(e.stats().waiting, 0);
}

TEST(Slots, ASequenceWaitsForRoomInTheKvCache) {
  config::SimSettings s = quiet();
  s.max_in_flight = 8;  // slots to spare: the KV cache is what bounds
  s.kv_tokens = 1000;
  Engine e(s);
  asio::io_context ioc;
  std::vector<std::string> log;
  std::optional<Engine::Slot> held;

  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
    auto slot = co_await e.acquire(600);
    log.push_back("A got");
    held = std::move(slot);
  }, asio::detached);
  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
    auto slot = co_await e.acquire(600);
    log.push_back("B got");
  }, asio::detached);
  ioc.poll();
  ASSERT_EQ(log, (std::vector<std::string>{"A got"}));
  EXPECT_EQ(e.stats().kv_used, 600);
  EXPECT_EQ(e.stats().waiting, 1);

  held.reset();  // room again
  ioc.restart();
  ioc.poll();
  ASSERT_EQ(log, (std::vector<std::string>{"A got", "B got"}));
  EXPECT_EQ(e.stats().kv_used, 0);

  // A sequence larger than the whole cache runs alone rather than never.
  std::optional<Engine::Slot> big;
  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> { big = co_await e.acquire(5000); }, asio::detached);
  ioc.restart();
  ioc.poll();
  ASSERT_TRUE(big && *big);
  EXPECT_EQ(e.stats().kv_used, 5000);
  big.reset();
  EXPECT_EQ(e.stats().kv_used, 0);
}

TEST(Slots, FifoOrder) {
  config::SimSettings s = quiet();
  s.max_in_flight = 1;
  Engine e(s);
  asio::io_context ioc;
  std::vector<int> order;
  std::vector<std::optional<Engine::Slot>> held(5);
  for (int i = 0; i < 5; ++i) {
    asio::co_spawn(ioc, [&, i]() -> asio::awaitable<void> {
      auto slot = co_await e.acquire();
      order.push_back(i);
      held[i] = std::move(slot);
    }, asio::detached);
  }
  ioc.poll();
  ASSERT_EQ(order, (std::vector<int>{0}));
  EXPECT_EQ(e.stats().waiting, 4);
  for (int i = 0; i < 4; ++i) {
    held[i].reset();
    ioc.restart();
    ioc.poll();
    ASSERT_EQ(order.size(), static_cast<std::size_t>(i + 2));
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(Slots, QueueFullIsRejectedAtOnce) {
  config::SimSettings s = quiet();
  s.max_in_flight = 1;
  s.max_waiting = 1;
  Engine e(s);
  asio::io_context ioc;
  std::vector<std::string> log;
  std::vector<std::optional<Engine::Slot>> held;
  for (const char* name : {"A", "B", "C"}) {
    asio::co_spawn(ioc, [&, name]() -> asio::awaitable<void> {
      auto slot = co_await e.acquire();
      log.push_back(std::string(name) + (slot ? " got" : " rejected"));
      held.push_back(std::move(slot));
    }, asio::detached);
  }
  ioc.poll();
  EXPECT_EQ(log, (std::vector<std::string>{"A got", "C rejected"}));
  EXPECT_EQ(e.stats().waiting, 1);
}

TEST(Slots, CancelWhileQueuedLeavesTheQueue) {
  config::SimSettings s = quiet();
  s.max_in_flight = 1;
  Engine e(s);
  asio::io_context ioc;
  auto first = std::make_optional<Engine::Slot>();
  bool timer_won = false;
  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
    *first = std::move(*co_await e.acquire());
  }, asio::detached);
  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
    asio::steady_timer t(co_await asio::this_coro::executor, 20ms);
    auto r = co_await (e.acquire() || t.async_wait(asio::use_awaitable));
    timer_won = r.index() == 1;
  }, asio::detached);
  ioc.poll();
  EXPECT_EQ(e.stats().waiting, 1);
  ioc.restart();
  ioc.run_for(5s);  // the timer fires, the queued acquire is cancelled
  EXPECT_TRUE(timer_won);
  EXPECT_EQ(e.stats().waiting, 0);
  EXPECT_EQ(e.stats().in_flight, 1);
  first.reset();
  EXPECT_EQ(e.stats().in_flight, 0);
}

TEST(Slots, RaisingMaxInFlightGrantsWaiters) {
  config::SimSettings s = quiet();
  s.max_in_flight = 1;
  Engine e(s);
  asio::io_context ioc;
  int got = 0;
  std::vector<std::optional<Engine::Slot>> held;
  for (int i = 0; i < 3; ++i) {
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
      auto slot = co_await e.acquire();
      ++got;
      held.push_back(std::move(slot));
    }, asio::detached);
  }
  ioc.poll();
  EXPECT_EQ(got, 1);
  std::string err;
  ASSERT_TRUE(e.update_settings(R"({"max_in_flight":3})", err)) << err;
  ioc.restart();
  ioc.poll();
  EXPECT_EQ(got, 3);
  EXPECT_EQ(e.stats().in_flight, 3);
}

TEST(Slots, ManyThreadsNeverExceedTheLimit) {
  config::SimSettings s = quiet();
  s.max_in_flight = 2;
  s.max_waiting = 100000;
  Engine e(s);
  std::atomic<int> inside{0}, peak{0}, done{0};
  constexpr int kThreads = 4, kPerThread = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      asio::io_context ioc;
      for (int i = 0; i < kPerThread; ++i) {
        asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
          auto slot = co_await e.acquire();
          if (!slot) co_return;
          const int now = ++inside;
          int p = peak.load();
          while (now > p && !peak.compare_exchange_weak(p, now)) {
          }
          asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::microseconds(200));
          co_await timer.async_wait(asio::use_awaitable);
          --inside;
          ++done;
        }, asio::detached);
      }
      ioc.run();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), kThreads * kPerThread);
  EXPECT_LE(peak.load(), 2);
  EXPECT_EQ(peak.load(), 2);  // 200 waiters on 2 slots: both were used at once at some point
  EXPECT_EQ(e.stats().in_flight, 0);
  EXPECT_EQ(e.stats().waiting, 0);
}

TEST(Stats, CountAndReset) {
  Engine e(quiet());
  e.count(Engine::Counter::requests);
  e.count(Engine::Counter::requests);
  e.count(Engine::Counter::cancelled);
  e.count(Engine::Counter::errors_503);
  auto st = e.stats();
  EXPECT_EQ(st.requests, 2u);
  EXPECT_EQ(st.cancelled, 1u);
  EXPECT_EQ(st.errors_503, 1u);
  auto j = boost::json::parse(stats_json(st)).as_object();
  EXPECT_EQ(j.at("requests").to_number<std::uint64_t>(), 2u);
  EXPECT_EQ(j.size(), 16u);
  e.count(Engine::Counter::moderations);
  EXPECT_EQ(e.stats().moderations, 1u);
  e.count(Engine::Counter::embeddings);
  EXPECT_EQ(e.stats().embeddings, 1u);
  EXPECT_EQ(e.stats().requests, 2u);
  e.count(Engine::Counter::responses);
  EXPECT_EQ(e.stats().responses, 1u);
  EXPECT_EQ(boost::json::parse(stats_json(e.stats())).as_object().at("responses").to_number<std::uint64_t>(), 1u);
  e.reset_stats();
  st = e.stats();
  EXPECT_EQ(st.requests, 0u);
  EXPECT_EQ(st.responses, 0u);
  EXPECT_EQ(st.cancelled, 0u);
}

TEST(EngineLoad, AChangedOptionOrAnUnloadLoadsTheModelAgain) {
  auto s = quiet();
  s.load_time = 200ms;
  Engine eng(s);
  const auto t0 = std::chrono::steady_clock::now();
  const LoadOptions d;
  const auto first = eng.ready_at("m", d);
  EXPECT_GE(first - t0, 200ms);
  EXPECT_EQ(eng.ready_at("m", d), first);  // the same load: no other
  LoadOptions big = d;
  big.num_ctx = 8192;
  EXPECT_GE(eng.ready_at("m", big) - first, 200ms);  // after the one in progress
  EXPECT_EQ(eng.stats().loads, 2u);
  EXPECT_EQ(eng.ready_at("other", d) - std::chrono::steady_clock::now() > 100ms, true);  // per model
  eng.unload("m");
  auto loaded = eng.loaded();
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].name, "other");
  eng.ready_at("m", big);
  EXPECT_EQ(eng.stats().loads, 4u);
}

TEST(EngineLoad, WithoutLoadTimeModelsAreAlwaysLoaded) {
  Engine eng(quiet());
  const auto now = std::chrono::steady_clock::now();
  LoadOptions o;
  o.num_gpu = 0;
  EXPECT_LE(eng.ready_at("m", o) - now, 50ms);
  EXPECT_EQ(eng.stats().loads, 0u);
  ASSERT_EQ(eng.loaded().size(), 1u);
  EXPECT_EQ(eng.loaded()[0].options.num_gpu, 0);
}

TEST(EngineLoad, PaceAndMemoryFollowTheLayersOnTheGpu) {
  auto s = quiet();
  LoadOptions all, none, half;
  none.num_gpu = 0;
  half.num_gpu = 12;
  EXPECT_DOUBLE_EQ(compute_factor(all, s), 1.0);
  EXPECT_DOUBLE_EQ(compute_factor(none, s), 2.5);
  EXPECT_DOUBLE_EQ(compute_factor(half, s), (0.5 + 0.5 * 2.5) * 1.1);
  LoadOptions more = all;
  more.num_gpu = 99;  // more than the layers: all of them
  EXPECT_DOUBLE_EQ(compute_factor(more, s), 1.0);
  const auto m = model_memory(all, s);
  EXPECT_EQ(m.size, m.vram);
  EXPECT_EQ(model_memory(none, s).vram, 0);
  EXPECT_EQ(model_memory(half, s).vram, m.size / 2);
  LoadOptions ctx = all;
  ctx.num_ctx = 8192;
  EXPECT_NEAR(static_cast<double>(model_memory(ctx, s).size - m.size) / (8192 - 2048), 12.8 * 1024, 1);
}
