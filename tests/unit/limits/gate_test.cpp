// The concurrency gate (limits/gate.hpp): slots per key, model and backend, and the
// priority queue in front of them. Timing cases use generous waits and assert outcomes and
// order, plus lower bounds on waits; never upper bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "limits/gate.hpp"

using namespace sluice;
using limits::Gate;
using limits::GatePass;
using config::Priority;
namespace net = boost::asio;
using namespace std::chrono_literals;

namespace {

config::ApiKey make_key(std::string name, int max_in_flight = -1, std::string tier = "standard",
                        std::optional<Priority> pr = std::nullopt) {
  config::ApiKey k;
  k.name = name;
  k.key = "sk-" + name;
  k.tenant = "t";
  k.tier = std::move(tier);
  k.models = {"*"};
  k.max_in_flight = max_in_flight;
  k.priority = pr;
  return k;
}

config::Route make_route(std::string alias, int max_in_flight = 0, int backend_max = 0, std::string host = "",
                         std::uint16_t port = 0) {
  config::Route r;
  r.alias = alias;
  r.max_in_flight = max_in_flight;
  config::Backend& b = r.backends.emplace_back();
  b.max_in_flight = backend_max;
  if (host.empty()) {
    b.provider = config::Provider::simulated;
    b.name = "simulated:" + alias;
  } else {
    b.provider = config::Provider::openai;
    b.host = host;
    b.port = port;
    b.base_url = "http://" + host + ":" + std::to_string(port);
    b.name = host + ":" + std::to_string(port);  // as the loader names it
  }
  b.model = alias;
  return r;
}

struct Req {
  std::string name;
  Gate::Need need;
  Gate::Cancel cancel;
  std::optional<Gate::Result> result;
  int finished = -1;  // completion order
};

class GateTest : public ::testing::Test {
 protected:
  GateTest() {
    cfg.concurrency.queue_size = 100;
    cfg.concurrency.max_wait = {60s, 60s, 60s};
  }

  void make() { gate = std::make_unique<Gate>(cfg); }

  const config::ApiKey& key(const std::string& name) const {
    for (const auto& k : cfg.keys) {
      if (k.name == name) return k;
    }
    throw std::runtime_error("no key " + name);
  }

  Req& start(const std::string& key_name, const std::string& alias, Priority p, std::string label = "",
             Gate::Wait wait = {}) {
    Req& r = reqs.emplace_back();
    r.name = label.empty() ? key_name + "/" + alias : label;
    r.need = gate->need(key(key_name), alias);
    net::co_spawn(io, gate->enter(r.need, p, r.cancel, wait), [this, &r](std::exception_ptr e, Gate::Result res) {
      if (e) std::rethrow_exception(e);
      r.result = res;
      r.finished = finished_++;
    });
    poll();
    return r;
  }

  void poll() {
    io.restart();
    io.poll();
  }

  template <class Pred>
  bool run_until(Pred pred, std::chrono::milliseconds limit = 20s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred() && std::chrono::steady_clock::now() < end) {
      io.restart();
      io.run_one_for(5ms);
    }
    return pred();
  }

  static bool granted(const Req& r) { return r.result && r.result->outcome == Gate::Outcome::granted; }

  // Releases `r`'s slots and lets the io_context deliver what that grants.
  void release(const Req& r) {
    gate->leave(r.need);
    poll();
  }

  config::Config cfg;
  net::io_context io;
  std::unique_ptr<Gate> gate;  // destroyed before the io_context
  std::deque<Req> reqs;        // stable addresses for the coroutines' Cancel&
  int finished_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Slots

TEST_F(GateTest, InactiveWithoutAnyLimit) {
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("m")};
  make();
  EXPECT_FALSE(gate->active());
  EXPECT_TRUE(gate->need(key("a"), "m").empty());
}

TEST_F(GateTest, ImmediateGrantWhenFree) {
  cfg.keys = {make_key("a", 2), make_key("free")};
  cfg.routes = {make_route("m")};
  make();
  ASSERT_TRUE(gate->active());
  Req& r = start("a", "m", Priority::premium);
  ASSERT_TRUE(r.result);
  EXPECT_EQ(r.result->outcome, Gate::Outcome::granted);
  EXPECT_FALSE(r.result->queued);
  EXPECT_FALSE(r.result->demoted);
  EXPECT_EQ(r.result->served_as, Priority::premium);
  EXPECT_EQ(r.result->waited_ms, 0.0);
  auto s = gate->snapshot();
  EXPECT_EQ(s.in_flight, 1);
  EXPECT_EQ(s.granted_now, 1u);
  // A key without a limit on a model without one needs nothing.
  EXPECT_TRUE(gate->need(key("free"), "m").empty());
  Req& f = start("free", "m", Priority::standard);
  ASSERT_TRUE(granted(f));
  EXPECT_EQ(gate->snapshot().in_flight, 1);
  release(r);
  EXPECT_EQ(gate->snapshot().in_flight, 0);
}

TEST_F(GateTest, PerKeyLimitAndDefaults) {
  cfg.concurrency.per_key = 1;
  cfg.keys = {make_key("a", 2), make_key("b", 2), make_key("dflt"), make_key("unlimited", 0)};
  cfg.routes = {make_route("m")};
  make();
  auto n = gate->need(key("a"), "m");
  ASSERT_NE(n.slots[0], nullptr);
  EXPECT_EQ(n.slots[0]->name, "key:a");
  EXPECT_EQ(n.slots[0]->limit, 2);
  ASSERT_NE(gate->need(key("dflt"), "m").slots[0], nullptr);
  EXPECT_EQ(gate->need(key("dflt"), "m").slots[0]->limit, 1);  // concurrency.per_key
  EXPECT_TRUE(gate->need(key("unlimited"), "m").empty());     // max_in_flight: 0

  Req& a1 = start("a", "m", Priority::standard);
  Req& a2 = start("a", "m", Priority::standard);
  Req& a3 = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(a1));
  ASSERT_TRUE(granted(a2));
  EXPECT_FALSE(a3.result);
  EXPECT_EQ(gate->snapshot().depth[0], 1);
  // Another key is not held up by a's queue.
  Req& b1 = start("b", "m", Priority::standard);
  ASSERT_TRUE(granted(b1));
  Req& d1 = start("dflt", "m", Priority::standard);
  Req& d2 = start("dflt", "m", Priority::standard);
  ASSERT_TRUE(granted(d1));
  EXPECT_FALSE(d2.result);
  auto s = gate->snapshot();
  EXPECT_EQ(s.in_flight, 4);
  EXPECT_EQ(s.depth[0], 2);

  release(a1);
  ASSERT_TRUE(granted(a3));
  EXPECT_TRUE(a3.result->queued);
  EXPECT_FALSE(d2.result);
  release(d1);
  ASSERT_TRUE(granted(d2));
  s = gate->snapshot();
  EXPECT_EQ(s.depth[0], 0);
  EXPECT_EQ(s.in_flight, 4);
  // All six were granted (b1 and d1 found their slots free while others queued).
  EXPECT_EQ(s.granted_now + s.granted_after_wait[0], 6u);
  EXPECT_GE(s.granted_after_wait[0], 2u);  // at least a3 and d2
  for (Req* r : {&a2, &a3, &b1, &d2}) release(*r);
  EXPECT_EQ(gate->snapshot().in_flight, 0);
}

TEST_F(GateTest, PerModelLimit) {
  cfg.keys = {make_key("a"), make_key("b")};
  cfg.routes = {make_route("m", 1), make_route("n")};
  make();
  EXPECT_EQ(gate->need(key("a"), "m").slots[1]->name, "model:m");
  Req& m1 = start("a", "m", Priority::standard);
  Req& m2 = start("b", "m", Priority::vip);
  ASSERT_TRUE(granted(m1));
  EXPECT_FALSE(m2.result);
  EXPECT_EQ(gate->snapshot().depth[2], 1);
  // Model n is not limited.
  EXPECT_TRUE(gate->need(key("b"), "n").empty());
  release(m1);
  ASSERT_TRUE(granted(m2));
  EXPECT_EQ(m2.result->served_as, Priority::vip);
  release(m2);
}

// The file read again: new limits for the requests waiting and those to come, a new alias
// with its slot, a removed one's slot unlimited; the slots held stay valid.
TEST_F(GateTest, ReconfigureChangesLimitsAndSettingsInPlace) {
  cfg.concurrency.per_key = 1;
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("m", 1), make_route("gone", 1)};
  make();
  Req& a1 = start("a", "m", Priority::standard);
  Req& a2 = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(a1));
  EXPECT_FALSE(a2.result) << "per_key 1";
  const auto held = a1.need;  // its slots must outlive the reload

  auto next = std::make_shared<config::Config>(cfg);
  next->concurrency.per_key = 3;
  next->concurrency.queue_size = 7;
  next->concurrency.tier_priority["gold"] = Priority::vip;
  next->concurrency.urgent_keywords = {"outage"};
  next->routes = {make_route("m", 2), make_route("new", 1)};
  gate->reconfigure(next);
  EXPECT_EQ(gate->settings().queue_size, 7);
  EXPECT_EQ(gate->settings().urgent_keywords, std::vector<std::string>{"outage"});
  config::ApiKey gold = make_key("g");
  gold.tier = "gold";
  EXPECT_EQ(gate->priority(gold, ""), Priority::vip);
  // The key's slot takes the new per_key once the keys are installed again.
  std::vector<const config::ApiKey*> keys{&key("a")};
  gate->update_keys(keys);
  poll();
  ASSERT_TRUE(granted(a2)) << "the waiting request let in by the raised limits";
  EXPECT_EQ(held.slots[1]->limit, 2) << "the same slot, its new limit";
  ASSERT_NE(gate->need(key("a"), "new").slots[1], nullptr);
  EXPECT_EQ(gate->need(key("a"), "new").slots[1]->limit, 1);
  EXPECT_EQ(gate->need(key("a"), "gone").slots[1]->limit, std::numeric_limits<int>::max());
  release(a1);
  release(a2);
  EXPECT_EQ(gate->snapshot().in_flight, 0);
  EXPECT_EQ(held.slots[1]->used, 0);
}

// A gateway started without any limit: a reload that brings one turns the gate on.
TEST_F(GateTest, ReconfigureTurnsAnInactiveGateOn) {
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("m")};
  make();
  ASSERT_FALSE(gate->active());
  auto next = std::make_shared<config::Config>(cfg);
  next->routes = {make_route("m", 1)};
  gate->reconfigure(next);
  EXPECT_TRUE(gate->active());
  Req& r1 = start("a", "m", Priority::standard);
  Req& r2 = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(r1));
  EXPECT_FALSE(r2.result);
  release(r1);
  ASSERT_TRUE(granted(r2));
  release(r2);
}

TEST_F(GateTest, BackendLimitSharedByRoutesToTheSameEndpoint) {
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("x", 0, 1, "10.0.0.5", 8000), make_route("y", 0, 1, "10.0.0.5", 8000),
                make_route("z", 0, 1, "10.0.0.6", 8000)};
  make();
  const auto nx = gate->need(key("a"), "x"), ny = gate->need(key("a"), "y"), nz = gate->need(key("a"), "z");
  ASSERT_NE(nx.slots[2], nullptr);
  EXPECT_EQ(nx.slots[2], ny.slots[2]);
  EXPECT_NE(nx.slots[2], nz.slots[2]);
  EXPECT_EQ(nx.slots[2]->name, "backend:10.0.0.5:8000");
  Req& x = start("a", "x", Priority::standard);
  Req& y = start("a", "y", Priority::standard);
  Req& z = start("a", "z", Priority::standard);
  ASSERT_TRUE(granted(x));
  EXPECT_FALSE(y.result);
  ASSERT_TRUE(granted(z));
  release(x);
  ASSERT_TRUE(granted(y));
  release(y);
  release(z);
  EXPECT_EQ(gate->snapshot().in_flight, 0);
}

TEST_F(GateTest, GatePassReleasesOnDestruction) {
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& a1 = start("a", "m", Priority::standard);
  Req& a2 = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(a1));
  EXPECT_FALSE(a2.result);
  {
    GatePass p(gate.get(), a1.need);
    GatePass moved(std::move(p));  // the moved-from pass releases nothing
  }
  poll();
  ASSERT_TRUE(granted(a2));
  EXPECT_EQ(gate->snapshot().in_flight, 1);
  { GatePass p(gate.get(), a2.need); }
  EXPECT_EQ(gate->snapshot().in_flight, 0);
}

// ---------------------------------------------------------------------------------------
// The queue

TEST_F(GateTest, VipBeforePremiumBeforeStandardFifoWithinAClass) {
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("m", 1)};
  make();
  Req& holder = start("a", "m", Priority::standard, "holder");
  ASSERT_TRUE(granted(holder));
  start("a", "m", Priority::standard, "S1");
  start("a", "m", Priority::premium, "P1");
  start("a", "m", Priority::vip, "V1");
  start("a", "m", Priority::standard, "S2");
  start("a", "m", Priority::vip, "V2");
  start("a", "m", Priority::premium, "P2");
  auto s = gate->snapshot();
  EXPECT_EQ(s.depth[0], 2);
  EXPECT_EQ(s.depth[1], 2);
  EXPECT_EQ(s.depth[2], 2);
  std::vector<std::string> order;
  const Req* current = &holder;
  for (int i = 0; i < 6; ++i) {
    release(*current);
    const Req* next = nullptr;
    for (const Req& r : reqs) {
      if (r.finished == i + 1) next = &r;
    }
    ASSERT_NE(next, nullptr) << "nothing granted after release " << i;
    ASSERT_TRUE(granted(*next));
    EXPECT_TRUE(next->result->queued);
    EXPECT_FALSE(next->result->demoted);
    order.push_back(next->name);
    current = next;
  }
  EXPECT_EQ(order, (std::vector<std::string>{"V1", "V2", "P1", "P2", "S1", "S2"}));
  for (const Req& r : reqs) {
    if (r.name[0] == 'V') {
      EXPECT_EQ(r.result->served_as, Priority::vip);
    } else if (r.name[0] == 'P') {
      EXPECT_EQ(r.result->served_as, Priority::premium);
    } else if (r.name[0] == 'S') {
      EXPECT_EQ(r.result->served_as, Priority::standard);
    }
  }
  release(*current);
  s = gate->snapshot();
  EXPECT_EQ(s.in_flight, 0);
  EXPECT_EQ(s.granted_after_wait[2], 2u);
  EXPECT_EQ(s.granted_after_wait[1], 2u);
  EXPECT_EQ(s.granted_after_wait[0], 2u);
  // Each queued request was observed once in its class's wait histogram.
  for (int c = 0; c < config::kPriorities; ++c) {
    std::uint64_t n = 0;
    for (auto b : s.wait_buckets[c]) n += b;
    EXPECT_EQ(n, 2u) << c;
  }
}

TEST_F(GateTest, WaiterBlockedOnItsKeyDoesNotBlockOthers) {
  cfg.keys = {make_key("a", 1), make_key("b")};
  cfg.routes = {make_route("m", 2)};
  make();
  Req& a1 = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(a1));
  Req& a2 = start("a", "m", Priority::vip);  // waits for key a
  EXPECT_FALSE(a2.result);
  Req& b1 = start("b", "m", Priority::standard);  // model m has room: served past the vip
  ASSERT_TRUE(granted(b1));
  Req& b2 = start("b", "m", Priority::standard);  // model m is full now
  EXPECT_FALSE(b2.result);
  // a1 leaves: key a and one model slot free. The vip a2 fits and goes first.
  release(a1);
  ASSERT_TRUE(granted(a2));
  EXPECT_FALSE(b2.result);
  release(b1);
  ASSERT_TRUE(granted(b2));
  release(a2);
  release(b2);
  EXPECT_EQ(gate->snapshot().in_flight, 0);
}

TEST_F(GateTest, QueueFull) {
  cfg.concurrency.queue_size = 2;
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& h = start("a", "m", Priority::standard);
  Req& w1 = start("a", "m", Priority::standard);
  Req& w2 = start("a", "m", Priority::vip);
  Req& full = start("a", "m", Priority::vip);
  ASSERT_TRUE(granted(h));
  EXPECT_FALSE(w1.result);
  EXPECT_FALSE(w2.result);
  ASSERT_TRUE(full.result);
  EXPECT_EQ(full.result->outcome, Gate::Outcome::queue_full);
  EXPECT_FALSE(full.result->queued);
  auto s = gate->snapshot();
  EXPECT_EQ(s.queue_full, 1u);
  EXPECT_EQ(s.depth[0] + s.depth[1] + s.depth[2], 2);
  EXPECT_EQ(s.in_flight, 1);
  release(h);
  ASSERT_TRUE(granted(w2));
  release(w2);
  ASSERT_TRUE(granted(w1));
  release(w1);
}

// One key cannot fill the shared queue for everyone: when the queue is full, a key with
// fewer requests waiting takes the place of the newest request of the key with the most.
TEST_F(GateTest, FullQueueIsSharedBetweenKeys) {
  cfg.concurrency.queue_size = 4;
  cfg.keys = {make_key("noisy", 1), make_key("quiet", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& n0 = start("noisy", "m", Priority::standard);
  ASSERT_TRUE(granted(n0));
  Req& q0 = start("quiet", "m", Priority::standard);
  ASSERT_TRUE(granted(q0));  // its own slot is free: it never queues
  Req& n1 = start("noisy", "m", Priority::standard, "n1");
  Req& n2 = start("noisy", "m", Priority::standard, "n2");
  Req& n3 = start("noisy", "m", Priority::standard, "n3");
  Req& n4 = start("noisy", "m", Priority::standard, "n4");
  EXPECT_EQ(gate->snapshot().depth[0], 4);
  // The noisy key's fifth waiter: the queue is full and it holds every place.
  Req& n5 = start("noisy", "m", Priority::standard, "n5");
  ASSERT_TRUE(n5.result);
  EXPECT_EQ(n5.result->outcome, Gate::Outcome::queue_full);
  // The quiet key's next request waits (its slot is busy): it takes n4's place.
  Req& q1 = start("quiet", "m", Priority::standard, "q1");
  EXPECT_FALSE(q1.result);
  ASSERT_TRUE(run_until([&] { return n4.result.has_value(); }));
  EXPECT_EQ(n4.result->outcome, Gate::Outcome::queue_full);
  EXPECT_FALSE(n1.result);
  EXPECT_FALSE(n3.result);
  release(q0);
  ASSERT_TRUE(granted(q1));
  release(n0);
  ASSERT_TRUE(granted(n1));
  release(n1);
  ASSERT_TRUE(granted(n2));
  release(n2);
  ASSERT_TRUE(granted(n3));
  release(n3);
  release(q1);
  auto s = gate->snapshot();
  EXPECT_EQ(s.in_flight, 0);
  EXPECT_EQ(s.queue_full, 2u);
  EXPECT_EQ(s.depth[0] + s.depth[1] + s.depth[2], 0);
}

// A request whose slots are free goes ahead even when the queue is full of others'.
TEST_F(GateTest, FreeSlotsNeedNoPlaceInAFullQueue) {
  cfg.concurrency.queue_size = 1;
  cfg.keys = {make_key("a", 1), make_key("b", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& a0 = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(a0));
  Req& a1 = start("a", "m", Priority::standard, "a1");
  EXPECT_FALSE(a1.result);
  Req& b0 = start("b", "m", Priority::standard);
  ASSERT_TRUE(granted(b0));
  release(a0);
  ASSERT_TRUE(granted(a1));
  release(a1);
  release(b0);
}

TEST_F(GateTest, QueueSizeZeroRefusesAnyWait) {
  cfg.concurrency.queue_size = 0;
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& h = start("a", "m", Priority::standard);
  Req& w = start("a", "m", Priority::vip);
  ASSERT_TRUE(granted(h));
  ASSERT_TRUE(w.result);
  EXPECT_EQ(w.result->outcome, Gate::Outcome::queue_full);
  release(h);
}

TEST_F(GateTest, StandardTimesOutAfterMaxWait) {
  cfg.concurrency.max_wait = {80ms, 60s, 60s};
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& h = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(h));
  const auto t0 = std::chrono::steady_clock::now();
  Req& w = start("a", "m", Priority::standard);
  ASSERT_TRUE(run_until([&] { return w.result.has_value(); }));
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(w.result->outcome, Gate::Outcome::timed_out);
  EXPECT_TRUE(w.result->queued);
  EXPECT_FALSE(w.result->demoted);
  EXPECT_EQ(w.result->served_as, Priority::standard);
  EXPECT_GE(w.result->waited_ms, 80.0);
  EXPECT_GE(elapsed, 80ms);
  auto s = gate->snapshot();
  EXPECT_EQ(s.timed_out[0], 1u);
  EXPECT_EQ(s.depth[0], 0);
  EXPECT_EQ(s.in_flight, 1);
  release(h);
  EXPECT_EQ(gate->snapshot().in_flight, 0);
  // The gate is free and the queue empty: the next one passes at once.
  Req& n = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(n));
  EXPECT_FALSE(n.result->queued);
  release(n);
}

TEST_F(GateTest, VipDemotedToStandardThenGranted) {
  cfg.concurrency.max_wait = {60s, 60s, 50ms};
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& h = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(h));
  Req& v = start("a", "m", Priority::vip);
  EXPECT_EQ(gate->snapshot().depth[2], 1);
  ASSERT_TRUE(run_until([&] { return gate->snapshot().demoted[2] == 1; }));
  EXPECT_FALSE(v.result);
  auto s = gate->snapshot();
  EXPECT_EQ(s.depth[2], 0);
  EXPECT_EQ(s.depth[0], 1);
  release(h);
  ASSERT_TRUE(run_until([&] { return v.result.has_value(); }));
  EXPECT_EQ(v.result->outcome, Gate::Outcome::granted);
  EXPECT_TRUE(v.result->demoted);
  EXPECT_EQ(v.result->served_as, Priority::standard);
  EXPECT_GE(v.result->waited_ms, 50.0);
  s = gate->snapshot();
  EXPECT_EQ(s.granted_after_wait[0], 1u);
  EXPECT_EQ(s.granted_after_wait[2], 0u);
  release(v);
}

// ---------------------------------------------------------------------------------------
// The wait a client accepts (Prefer: wait=N) and a route's own max wait (overload)

TEST_F(GateTest, WithoutAMeasuredHoldTimeTheEstimateIsUnknownAndTheRequestWaits) {
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("m", 1)};
  make();
  Req& h = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(h));
  Req& w = start("a", "m", Priority::standard, "w", {.accept_ms = 0});
  EXPECT_FALSE(w.result) << "queued: no estimate to judge by";
  release(h);
  ASSERT_TRUE(run_until([&] { return w.result.has_value(); }));
  EXPECT_EQ(w.result->outcome, Gate::Outcome::granted);
  release(w);
}

TEST_F(GateTest, ARequestThatWouldWaitLongerThanItsClientAcceptsLeavesWithTheEstimate) {
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("m", 1)};
  make();
  Req& first = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(first));
  gate->leave(first.need, 200.0);  // held for 200 ms
  Req& h = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(h));
  Req& impatient = start("a", "m", Priority::standard, "impatient", {.accept_ms = 100});
  ASSERT_TRUE(impatient.result);
  EXPECT_EQ(impatient.result->outcome, Gate::Outcome::queued);
  EXPECT_DOUBLE_EQ(impatient.result->eta_ms, 200.0);
  EXPECT_EQ(impatient.result->position, 1);
  Req& patient = start("a", "m", Priority::standard, "patient", {.accept_ms = 1000});
  EXPECT_FALSE(patient.result) << "200 ms is within what it accepts: it waits";
  Req& second = start("a", "m", Priority::standard, "second", {.accept_ms = 300});
  ASSERT_TRUE(second.result);
  EXPECT_EQ(second.result->outcome, Gate::Outcome::queued);
  EXPECT_DOUBLE_EQ(second.result->eta_ms, 400.0) << "one ahead of it";
  EXPECT_EQ(second.result->position, 2);
  Req& vip = start("a", "m", Priority::vip, "vip", {.accept_ms = 300});
  EXPECT_FALSE(vip.result) << "no vip ahead of it: 200 ms";
  auto s = gate->snapshot();
  EXPECT_EQ(s.eta_answers, 2u);
  EXPECT_EQ(s.depth[0] + s.depth[2], 2) << "the two that left hold no place";
  release(h);
  ASSERT_TRUE(run_until([&] { return vip.result.has_value(); }));
  EXPECT_EQ(vip.result->outcome, Gate::Outcome::granted);
  release(vip);
  ASSERT_TRUE(run_until([&] { return patient.result.has_value(); }));
  release(patient);
}

TEST_F(GateTest, ADemotedRequestWhoseNewEstimateIsTooLongLeavesWithIt) {
  cfg.concurrency.max_wait = {60s, 60s, 50ms};
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("m", 1)};
  make();
  Req& first = start("a", "m", Priority::standard);
  gate->leave(first.need, 1000.0);
  Req& h = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(h));
  Req& earlier = start("a", "m", Priority::standard, "earlier");
  Req& v = start("a", "m", Priority::vip, "vip", {.accept_ms = 1500});
  EXPECT_FALSE(v.result) << "as vip, next: 1000 ms";
  ASSERT_TRUE(run_until([&] { return v.result.has_value(); }));
  EXPECT_EQ(v.result->outcome, Gate::Outcome::queued);
  EXPECT_TRUE(v.result->demoted);
  EXPECT_DOUBLE_EQ(v.result->eta_ms, 2000.0) << "as standard, behind the earlier one";
  EXPECT_EQ(v.result->position, 2);
  EXPECT_EQ(gate->snapshot().depth[0], 1) << "only the earlier one waits";
  {
    const auto s = gate->snapshot();
    std::uint64_t waits = 0;
    for (auto n : s.wait_buckets[0]) waits += n;
    EXPECT_EQ(waits, 1u) << "its wait is in the standard class's histogram";
    EXPECT_GT(s.wait_sum[0], 0.0);
  }
  release(h);
  ASSERT_TRUE(run_until([&] { return earlier.result.has_value(); }));
  release(earlier);
}

TEST_F(GateTest, ARequestsOwnMaxWaitEndsItsWaitBeforeItsClasss) {
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("m", 1)};
  make();
  Req& h = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(h));
  Req& w = start("a", "m", Priority::vip, "w", {.max_wait = 30ms});
  ASSERT_TRUE(run_until([&] { return w.result.has_value(); }, 5s));
  EXPECT_EQ(w.result->outcome, Gate::Outcome::timed_out);
  EXPECT_FALSE(w.result->demoted);
  EXPECT_GE(w.result->waited_ms, 30.0);
  auto s = gate->snapshot();
  EXPECT_EQ(s.depth[2], 0);
  EXPECT_EQ(s.timed_out[0], 1u);
  release(h);
}

TEST_F(GateTest, ABackendsChangedLimitMovesItsSlotAndItsRoutesSum) {
  cfg.keys = {make_key("a")};
  cfg.routes = {make_route("solo", 0, 2, "10.0.0.1", 8000), make_route("pair", 0, 2, "10.0.0.2", 8000)};
  {
    config::Backend b = cfg.routes[1].backends[0];
    b.host = "10.0.0.3";
    b.name = "10.0.0.3:8000";
    cfg.routes[1].backends.push_back(b);  // pair: two backends of 2 each, a model slot of 4
  }
  make();
  Req& s1 = start("a", "solo", Priority::standard);
  Req& s2 = start("a", "solo", Priority::standard);
  ASSERT_TRUE(granted(s1) && granted(s2));
  gate->limit_backend("10.0.0.1:8000", 1);  // lowered: the two in flight finish, nothing new
  release(s1);
  Req& s3 = start("a", "solo", Priority::standard);
  EXPECT_FALSE(s3.result) << "one in flight at a limit of 1";
  gate->limit_backend("10.0.0.1:8000", 3);  // raised: the waiter goes at once
  poll();
  ASSERT_TRUE(granted(s3));
  std::vector<Req*> pair;
  for (int i = 0; i < 4; ++i) pair.push_back(&start("a", "pair", Priority::standard));
  for (auto* r : pair) EXPECT_TRUE(granted(*r));
  Req& p5 = start("a", "pair", Priority::standard);
  EXPECT_FALSE(p5.result) << "the sum, 4";
  gate->limit_backend("10.0.0.3:8000", 3);  // 2 + 3
  poll();
  EXPECT_TRUE(granted(p5));
  gate->limit_backend("10.0.0.2:8000", 1);  // 1 + 3: five in flight, none more
  release(*pair[0]);
  Req& p6 = start("a", "pair", Priority::standard);
  EXPECT_FALSE(p6.result);
  release(*pair[1]);
  EXPECT_TRUE(granted(p6));
  for (Req* r : {&s2, &s3, pair[2], pair[3], &p5, &p6}) release(*r);
  // A reload keeps the adaptive limits announced (the router keeps its adaptive state), not
  // the file's 2 per backend.
  gate->reconfigure(std::make_shared<config::Config>(cfg));
  EXPECT_EQ(gate->need(key("a"), "solo").slots[2]->limit, 3);
  EXPECT_EQ(gate->need(key("a"), "pair").slots[1]->limit, 4) << "1 + 3";
}

TEST_F(GateTest, PremiumDemotedThenTimesOutAtStandardMaxWaitFromArrival) {
  cfg.concurrency.max_wait = {150ms, 30ms, 60s};
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& h = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(h));
  const auto t0 = std::chrono::steady_clock::now();
  Req& p = start("a", "m", Priority::premium);
  ASSERT_TRUE(run_until([&] { return p.result.has_value(); }));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  EXPECT_EQ(p.result->outcome, Gate::Outcome::timed_out);
  EXPECT_TRUE(p.result->demoted);
  EXPECT_EQ(p.result->served_as, Priority::standard);
  EXPECT_GE(p.result->waited_ms, 150.0);
  auto s = gate->snapshot();
  EXPECT_EQ(s.demoted[1], 1u);
  EXPECT_EQ(s.timed_out[0], 1u);
  EXPECT_EQ(s.depth[0] + s.depth[1] + s.depth[2], 0);
  release(h);
}

TEST_F(GateTest, DemotedVipKeepsItsArrivalOrderAmongStandard) {
  cfg.concurrency.max_wait = {60s, 60s, 40ms};
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& h = start("a", "m", Priority::standard, "H");
  ASSERT_TRUE(granted(h));
  Req& s0 = start("a", "m", Priority::standard, "S0");
  Req& v = start("a", "m", Priority::vip, "V");
  Req& s1 = start("a", "m", Priority::standard, "S1");
  ASSERT_TRUE(run_until([&] { return gate->snapshot().demoted[2] == 1; }));
  EXPECT_EQ(gate->snapshot().depth[0], 3);
  release(h);
  ASSERT_TRUE(granted(s0));
  EXPECT_FALSE(v.result);
  release(s0);
  ASSERT_TRUE(granted(v));
  EXPECT_TRUE(v.result->demoted);
  EXPECT_FALSE(s1.result);
  release(v);
  ASSERT_TRUE(granted(s1));
  release(s1);
}

TEST_F(GateTest, CancelRemovesTheWaiter) {
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& h = start("a", "m", Priority::standard);
  Req& w = start("a", "m", Priority::premium);
  ASSERT_TRUE(granted(h));
  EXPECT_EQ(gate->snapshot().depth[1], 1);
  net::post(io, [&] { w.cancel(); });
  poll();
  ASSERT_TRUE(w.result);
  EXPECT_EQ(w.result->outcome, Gate::Outcome::cancelled);
  EXPECT_TRUE(w.result->queued);
  auto s = gate->snapshot();
  EXPECT_EQ(s.depth[1], 0);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.in_flight, 1);
  w.cancel();  // after the end: harmless
  release(h);
  EXPECT_EQ(gate->snapshot().in_flight, 0);
}

TEST_F(GateTest, CancelTakesTheWaiterOutOfTheQueueAtOnce) {
  // gate.hpp: calling Cancel "removes the request from the queue at once".
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& h = start("a", "m", Priority::standard);
  Req& w = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(h));
  int depth_after_cancel = -1;
  net::post(io, [&] {
    w.cancel();
    depth_after_cancel = gate->snapshot().depth[0];
  });
  poll();
  EXPECT_EQ(depth_after_cancel, 0);
  ASSERT_TRUE(w.result);
  EXPECT_EQ(w.result->outcome, Gate::Outcome::cancelled);
  release(h);
}

TEST_F(GateTest, CancelledWaiterDoesNotTakeASlotFreedRightAfter) {
  // A client leaves while queued (cancel), and before its coroutine resumes another request
  // ends (leave, which may run on any worker). The slot must go to the next live waiter.
  cfg.keys = {make_key("a", 1)};
  cfg.routes = {make_route("m")};
  make();
  Req& h = start("a", "m", Priority::standard);
  Req& gone = start("a", "m", Priority::standard);
  Req& next = start("a", "m", Priority::standard);
  ASSERT_TRUE(granted(h));
  net::post(io, [&] {
    gone.cancel();
    gate->leave(h.need);
  });
  poll();
  ASSERT_TRUE(gone.result);
  EXPECT_EQ(gone.result->outcome, Gate::Outcome::cancelled);
  EXPECT_TRUE(granted(next));
  // Clean up whichever holds the slot.
  if (granted(gone)) release(gone);
  ASSERT_TRUE(granted(next));
  release(next);
  EXPECT_EQ(gate->snapshot().in_flight, 0);
}

// ---------------------------------------------------------------------------------------
// priority()

TEST_F(GateTest, PriorityHeaderHonouredUpToTheKeysOwnClass) {
  cfg.concurrency.tier_priority = {{"gold", Priority::vip}, {"silver", Priority::premium}};
  cfg.keys = {make_key("gold", 1, "gold"), make_key("silver", 1, "silver"), make_key("plain", 1, "free"),
              make_key("own-premium", 1, "gold", Priority::premium),
              make_key("own-vip", 1, "standard", Priority::vip)};
  cfg.routes = {make_route("m")};
  make();
  EXPECT_EQ(gate->priority(key("gold"), ""), Priority::vip);
  EXPECT_EQ(gate->priority(key("gold"), "premium"), Priority::premium);
  EXPECT_EQ(gate->priority(key("gold"), "standard"), Priority::standard);
  EXPECT_EQ(gate->priority(key("gold"), "vip"), Priority::vip);
  EXPECT_EQ(gate->priority(key("gold"), "bogus"), Priority::vip);
  EXPECT_EQ(gate->priority(key("silver"), ""), Priority::premium);
  EXPECT_EQ(gate->priority(key("silver"), "vip"), Priority::premium);
  EXPECT_EQ(gate->priority(key("silver"), "standard"), Priority::standard);
  // A tier without a class: standard, and the header cannot raise it.
  EXPECT_EQ(gate->priority(key("plain"), ""), Priority::standard);
  EXPECT_EQ(gate->priority(key("plain"), "vip"), Priority::standard);
  EXPECT_EQ(gate->priority(key("plain"), "premium"), Priority::standard);
  // The key's own priority wins over its tier's class, in both directions.
  EXPECT_EQ(gate->priority(key("own-premium"), ""), Priority::premium);
  EXPECT_EQ(gate->priority(key("own-premium"), "vip"), Priority::premium);
  EXPECT_EQ(gate->priority(key("own-vip"), ""), Priority::vip);
  EXPECT_EQ(gate->priority(key("own-vip"), "vip"), Priority::vip);
  EXPECT_EQ(gate->priority(key("own-vip"), "premium"), Priority::premium);
}

// ---------------------------------------------------------------------------------------
// Threads

TEST(GateThreads, TwoWorkersNeverExceedTheLimit) {
  config::Config cfg;
  cfg.concurrency.queue_size = 1000;
  cfg.concurrency.max_wait = {60s, 60s, 60s};
  cfg.keys = {make_key("a", 3)};
  cfg.routes = {make_route("m")};
  Gate gate(cfg);
  const auto need = gate.need(cfg.keys[0], "m");
  ASSERT_FALSE(need.empty());

  std::atomic<int> in_flight{0}, max_seen{0}, completed{0}, granted{0}, other{0};
  constexpr int kRequests = 200;
  std::array<net::io_context, 2> ios;
  auto one = [&](int i) -> net::awaitable<void> {
    Gate::Cancel cancel;
    const Priority p = static_cast<Priority>(i % config::kPriorities);
    auto res = co_await gate.enter(need, p, cancel);
    if (res.outcome == Gate::Outcome::granted) {
      granted.fetch_add(1);
      const int now = in_flight.fetch_add(1) + 1;
      int m = max_seen.load();
      while (now > m && !max_seen.compare_exchange_weak(m, now)) {
      }
      net::steady_timer t(co_await net::this_coro::executor);
      t.expires_after(std::chrono::microseconds(200 + (i % 5) * 300));
      co_await t.async_wait(net::use_awaitable);
      in_flight.fetch_sub(1);
      gate.leave(need);
    } else {
      other.fetch_add(1);
    }
    completed.fetch_add(1);
  };
  for (int i = 0; i < kRequests; ++i) {
    net::co_spawn(ios[i % 2], one(i), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
  }
  std::vector<std::thread> threads;
  for (auto& io : ios) threads.emplace_back([&io] { io.run_for(60s); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(completed.load(), kRequests);
  EXPECT_EQ(granted.load(), kRequests);
  EXPECT_EQ(other.load(), 0);
  EXPECT_LE(max_seen.load(), 3);
  EXPECT_GE(max_seen.load(), 1);
  auto s = gate.snapshot();
  EXPECT_EQ(s.in_flight, 0);
  EXPECT_EQ(s.depth[0] + s.depth[1] + s.depth[2], 0);
  std::uint64_t total = s.granted_now;
  for (auto n : s.granted_after_wait) total += n;
  EXPECT_EQ(total, static_cast<std::uint64_t>(kRequests));
}
