// The filter chain (src/filters/filter.hpp): order, stop, wait, end hooks and per-request
// state; and the max_messages filter through the registry.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/this_coro.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "llm/chat.hpp"
#include "telemetry/record.hpp"

namespace sluice::filters {
namespace {

namespace net = boost::asio;

// The client's side as a filter sees it; only request() is used by these filters.
class TestRequest final : public http::Request {
 public:
  std::string body_;
  std::string_view method() const override { return "POST"; }
  std::string_view target() const override { return "/v1/chat/completions"; }
  std::string_view body() const override { return body_; }
  std::string_view header(std::string_view) const override { return {}; }
};

class TestExchange final : public http::Exchange {
 public:
  explicit TestExchange(net::any_io_executor ex) : ex_(std::move(ex)) {}
  TestRequest req;
  const http::Request& request() const override { return req; }
  net::any_io_executor executor() const override { return ex_; }
  net::awaitable<bool> reply(http::Response) override { co_return true; }
  net::awaitable<bool> begin_stream(int, std::string_view, const http::HeaderList&) override { co_return true; }
  net::awaitable<bool> write_chunk(std::string_view) override { co_return true; }
  net::awaitable<bool> end_stream() override { co_return true; }
  net::awaitable<void> wait_client_gone() override { co_return; }
  bool client_gone() const override { return false; }
  void watch_client(std::function<void()>) override {}
  void unwatch_client() override {}
  void set_write_timeout(std::chrono::milliseconds) override {}
  void abort() override {}
  bool started() const override { return false; }

 private:
  net::any_io_executor ex_;
};

// A filter that logs its calls and answers as told.
struct Log {
  std::vector<std::string> calls;
  int states_alive = 0;
};

struct Counted {
  Log* log = nullptr;
  int value = 0;
  alignas(64) char big[600];  // more than a pass keeps inline with two of them
  ~Counted() {
    if (log) --log->states_alive;
  }
};

class Probe final : public FilterWith<Counted> {
 public:
  Probe(std::string n, Log& log, unsigned phases, Next at_request = Next::go, Next at_admit = Next::go,
        Next after_wait = Next::go)
      : n_(std::move(n)), log_(log), phases_(phases), request_(at_request), admit_(at_admit), after_wait_(after_wait) {}
  std::string_view name() const override { return n_; }
  unsigned phases() const override { return phases_; }

 protected:
  Next on(Phase p, Request&, Counted& s, Stop& stop) override {
    if (!s.log) {
      s.log = &log_;
      ++log_.states_alive;
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&s) % alignof(Counted), 0u);
    }
    s.value++;
    log_.calls.push_back(n_ + (p == Phase::request ? ".request" : ".admit"));
    const Next n = p == Phase::request ? request_ : admit_;
    if (n == Next::stop) stop.reason = Reason::forbidden, stop.message = n_;
    return n;
  }
  net::awaitable<Next> wait(Phase, Request&, Counted& s, Stop& stop) override {
    co_await net::post(co_await net::this_coro::executor, net::use_awaitable);  // really suspends
    log_.calls.push_back(n_ + ".wait");
    if (after_wait_ == Next::stop) stop.reason = Reason::queue_full, stop.message = n_;
    co_return after_wait_;
  }
  void answered(Request&, Counted& s) override {
    log_.calls.push_back(n_ + ".answered(" + std::to_string(s.value) + ")");
  }
  void end(Request&, Counted& s) override { log_.calls.push_back(n_ + ".end(" + std::to_string(s.value) + ")"); }

 private:
  std::string n_;
  Log& log_;
  unsigned phases_;
  Next request_, admit_, after_wait_;
};

constexpr unsigned kAll = bit(Phase::request) | bit(Phase::admit) | bit(Phase::end);

struct Fixture {
  net::io_context io;
  TestExchange ex{io.get_executor()};
  config::Config cfg;
  config::ApiKey key;
  llm::ChatRequest chat;
  http::HeaderList headers;
  telemetry::RequestRecord rec;
  Request req{.key = key, .chat = chat, .api = "chat.completions", .ex = ex, .route = {}, .reply_headers = headers, .rec = rec};

  // Runs both phases as the handler does (with `answer`, the answered hooks after a go,
  // twice), then the end hooks; the outcome.
  Next run(std::shared_ptr<Chain> chain, Stop* out = nullptr, bool answer = false) {
    auto fut = net::co_spawn(
        io,
        [&]() -> net::awaitable<Next> {
          Pass pass(chain, req);
          Next n = Next::go;
          for (auto ph : {Phase::request, Phase::admit}) {
            n = pass.run(ph);
            if (n == Next::wait) n = co_await pass.resume(ph);
            if (n != Next::go) break;
          }
          if (out) *out = pass.stop();
          if (answer && n == Next::go) {
            pass.answered();
            pass.answered();  // once
          }
          pass.end();
          pass.answered();  // none after the end
          pass.end();  // idempotent
          co_return n;
        },
        net::use_future);
    io.run();
    io.restart();
    return fut.get();
  }
};

TEST(FilterChain, RunsInOrderAndEndsInReverse) {
  Fixture f;
  Log log;
  auto c = std::make_shared<Chain>();
  c->add(std::make_unique<Probe>("a", log, kAll));
  c->add(nullptr);  // a policy that is off
  c->add(std::make_unique<Probe>("b", log, bit(Phase::admit) | bit(Phase::end)));
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ(f.run(c), Next::go);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"a.request", "a.admit", "b.admit", "b.end(1)", "a.end(2)"}));
  EXPECT_EQ(log.states_alive, 0) << "every state is dropped with its pass";
}

TEST(FilterChain, AnsweredHooksRunInOrderOnceBeforeTheEndOnlyForFiltersThatSawTheRequest) {
  Fixture f;
  Log log;
  auto c = std::make_shared<Chain>();
  c->add(std::make_unique<Probe>("a", log, kAll | bit(Phase::answered)));
  c->add(std::make_unique<Probe>("b", log, bit(Phase::admit) | bit(Phase::end)));  // no answered hook
  c->add(std::make_unique<Probe>("c", log, bit(Phase::admit) | bit(Phase::answered)));
  EXPECT_EQ(f.run(c, nullptr, true), Next::go);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"a.request", "a.admit", "b.admit", "c.admit", "a.answered(2)",
                                                 "c.answered(1)", "b.end(1)", "a.end(2)"}));
}

TEST(FilterChain, AStopEndsThePhaseAndOnlyTheFiltersThatSawTheRequestEnd) {
  Fixture f;
  Log log;
  auto c = std::make_shared<Chain>();
  c->add(std::make_unique<Probe>("a", log, kAll));
  c->add(std::make_unique<Probe>("b", log, kAll, Next::stop));
  c->add(std::make_unique<Probe>("c", log, kAll));
  Stop stop;
  EXPECT_EQ(f.run(c, &stop), Next::stop);
  EXPECT_EQ(stop.reason, Reason::forbidden);
  EXPECT_EQ(stop.message, "b");
  // Stopped at the request phase: c never saw the request, so only a and b end.
  EXPECT_EQ(log.calls, (std::vector<std::string>{"a.request", "b.request", "b.end(1)", "a.end(1)"}));
}

TEST(FilterChain, AFilterThatWaitsIsAwaitedAndTheRestRunAfterIt) {
  Fixture f;
  Log log;
  auto c = std::make_shared<Chain>();
  c->add(std::make_unique<Probe>("a", log, kAll, Next::go, Next::wait));
  c->add(std::make_unique<Probe>("b", log, kAll, Next::go, Next::wait));
  c->add(std::make_unique<Probe>("c", log, kAll));
  EXPECT_EQ(f.run(c), Next::go);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"a.request", "b.request", "c.request", "a.admit", "a.wait", "b.admit",
                                                 "b.wait", "c.admit", "c.end(2)", "b.end(2)", "a.end(2)"}));
  EXPECT_EQ(log.states_alive, 0);
}

TEST(FilterChain, ARefusalAfterAWaitEndsTheFiltersAdmittedBeforeIt) {
  // As the gate refusing a request the rate limiter admitted: the limiter's end hook
  // still runs (it settles nothing was used); the filters after it never run.
  Fixture f;
  Log log;
  auto c = std::make_shared<Chain>();
  c->add(std::make_unique<Probe>("limits", log, kAll));
  c->add(std::make_unique<Probe>("gate", log, kAll, Next::go, Next::wait, Next::stop));
  c->add(std::make_unique<Probe>("later", log, kAll));
  Stop stop;
  EXPECT_EQ(f.run(c, &stop), Next::stop);
  EXPECT_EQ(stop.reason, Reason::queue_full);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"limits.request", "gate.request", "later.request", "limits.admit",
                                                 "gate.admit", "gate.wait", "later.end(1)", "gate.end(2)",
                                                 "limits.end(2)"}));
}

TEST(FilterChain, AFilterWithoutAnAdmitHookStillEnds) {
  // As a cache: it looks at the request and records at the end; nothing admits.
  Fixture f;
  Log log;
  auto c = std::make_shared<Chain>();
  c->add(std::make_unique<Probe>("cache", log, bit(Phase::request) | bit(Phase::end)));
  EXPECT_EQ(f.run(c), Next::go);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"cache.request", "cache.end(1)"}));
}

class Thrower final : public Filter {
 public:
  std::string_view name() const override { return "thrower"; }
  unsigned phases() const override { return bit(Phase::request) | bit(Phase::end); }
  void end(Request&, void*) override { throw std::runtime_error("end failed"); }
};

TEST(FilterChain, AnEndHookThatThrowsDoesNotSkipTheOthers) {
  Fixture f;
  Log log;
  auto c = std::make_shared<Chain>();
  c->add(std::make_unique<Probe>("limits", log, kAll));
  c->add(std::make_unique<Thrower>());
  {
    Pass pass(c, f.req);
    ASSERT_EQ(pass.run(Phase::request), Next::go);
    ASSERT_EQ(pass.run(Phase::admit), Next::go);
    EXPECT_THROW(pass.end(), std::runtime_error);
    pass.end();  // nothing runs twice
  }
  EXPECT_EQ(log.calls, (std::vector<std::string>{"limits.request", "limits.admit", "limits.end(2)"}));
  EXPECT_EQ(log.states_alive, 0);
}

// ---- max_messages, through the registry ----------------------------------------------

llm::ChatRequest parse(const std::string& body, const config::Config& cfg) {
  auto r = llm::parse_chat_request(body, cfg);
  if (auto* e = std::get_if<llm::RequestError>(&r)) ADD_FAILURE() << e->message;
  return std::get<llm::ChatRequest>(r);
}

std::string messages(int users, bool system) {
  std::string m = system ? R"({"role":"system","content":"be brief"},)" : "";
  for (int i = 0; i < users; ++i) m += std::string(i ? "," : "") + R"({"role":"user","content":"hi"})";
  return R"({"model":"m","messages":[)" + m + "]}";
}

TEST(MaxMessages, OffByDefaultAndCountsMessagesButSystemOnes) {
  Fixture f;
  {
    Chain c = make_chain({.cfg = f.cfg});
    for (std::size_t i = 0; i < c.size(); ++i) EXPECT_NE(c.at(i).name(), "max_messages");
  }
  f.cfg.max_messages = 3;
  auto c = std::make_shared<Chain>(make_chain({.cfg = f.cfg}));
  f.key.models = {"*"};
  config::Route route;
  f.req.route.config = &route;

  f.chat = parse(messages(3, true), f.cfg);
  EXPECT_EQ(f.run(c), Next::go) << "3 messages and a system one";

  f.chat = parse(messages(4, false), f.cfg);
  Stop stop;
  EXPECT_EQ(f.run(c, &stop), Next::stop);
  EXPECT_EQ(stop.reason, Reason::too_many_messages);
  EXPECT_EQ(stop.param, "messages");
  EXPECT_EQ(stop.retry_after_ms, -1);
  EXPECT_NE(stop.message.find("4 messages"), std::string::npos) << stop.message;

  f.req.kind = Kind::count_tokens;  // counting tokens is not capped
  EXPECT_EQ(f.run(c), Next::go);
}

}  // namespace
}  // namespace sluice::filters
