// Redis Cluster: the slot map (CLUSTER SLOTS), one pipelined connection per node, commands
// routed by their key's slot. See redis.hpp and docs/redis.md ("Redis Cluster").
//
// - The map is read from any node that answers (the seeds at first), again every 5 s, at
//   once (at most every 100 ms) after a MOVED, a CLUSTERDOWN or a node's lost connection,
//   and every 250 ms while a node serving slots is down (a failover: its replica is
//   promoted after the cluster's node timeout, and the map then names it).
// - MOVED: the slot's owner is updated and the command goes there. ASK (a slot being
//   migrated): ASKING then the command, on the named node, this time only. TRYAGAIN (a
//   multi-key command during a migration): again a moment later. At most 5 redirects.
// - A command that fails in transport (timeout, lost connection) is never sent again: it
//   may have run. One that could not be sent fails at once, as with one server.
// - Connections are made to every node the map names, replicas too: one that is promoted
//   is connected already.
#include "store/redis_cluster.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cctype>
#include <charconv>
#include <chrono>
#include <map>
#include <mutex>

namespace sluice::store {

namespace net = boost::asio;
using net::awaitable;
using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
constexpr auto nothrow = net::as_tuple(net::use_awaitable);

namespace {

constexpr std::size_t kSlots = 16384;
constexpr int kMaxRedirects = 5;

// CRC16/XMODEM (polynomial 0x1021, initial 0), as the Redis Cluster specification's.
constexpr std::array<std::uint16_t, 256> make_crc_table() {
  std::array<std::uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    auto crc = static_cast<std::uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    t[i] = crc;
  }
  return t;
}
constexpr auto kCrc = make_crc_table();

std::string upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

std::string host_port(const std::string& host, std::uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

std::uint16_t key_slot(std::string_view key) noexcept {
  if (const auto open = key.find('{'); open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  std::uint16_t crc = 0;
  for (const unsigned char c : key) crc = static_cast<std::uint16_t>((crc << 8) ^ kCrc[((crc >> 8) ^ c) & 0xff]);
  return static_cast<std::uint16_t>(crc & (kSlots - 1));
}

struct RedisConnection::Cluster : std::enable_shared_from_this<Cluster> {
  struct Node {
    RedisHost at;
    std::string name;  // host:port
    std::unique_ptr<RedisConnection> conn;
    std::atomic<bool> owner{false};  // serves slots in the map now
  };

  Cluster(net::any_io_executor e, RedisEndpoint endpoint, RedisOptions o)
      : ex(std::move(e)), ep(std::move(endpoint)), opt(o), timer(ex), pause(ex) {}

  net::any_io_executor ex;
  RedisEndpoint ep;
  RedisOptions opt;
  net::steady_timer timer, pause;
  // Only grows (a Node's address is stable); changed on the executor under `mu`, which
  // other threads' status reads take.
  std::vector<std::unique_ptr<Node>> nodes;
  mutable std::mutex mu;
  std::string map_error;                // why the map could not be read last (mu)
  std::array<Node*, kSlots> slots{};    // executor only
  std::atomic<bool> mapped{false}, complete{false};
  bool started = false, stopped = false, poked = false;
  Clock::time_point last_read{};
  std::atomic<std::uint64_t> n_commands{0}, n_failures{0};

  Node& node(const std::string& host, std::uint16_t port) {
    std::string name = host_port(host, port);
    for (auto& n : nodes) {
      if (n->name == name) return *n;
    }
    auto n = std::make_unique<Node>();
    n->at = RedisHost{host, port};
    n->name = std::move(name);
    RedisEndpoint e;
    e.host = host;
    e.port = port;
    e.username = ep.username;
    e.password = ep.password;
    n->conn = std::make_unique<RedisConnection>(ex, std::move(e), opt);
    if (started) n->conn->start();
    Node& ref = *n;
    std::lock_guard lock(mu);
    nodes.push_back(std::move(n));
    return ref;
  }

  // The map is read again now (or as soon as the last reading is 100 ms old).
  void poke() {
    if (stopped) return;
    poked = true;
    timer.cancel();
  }

  void set_error(std::string e) {
    std::lock_guard lock(mu);
    map_error = std::move(e);
  }

  Node* any_node() {
    Node* fallback = nullptr;
    for (auto& n : nodes) {
      if (n->owner && n->conn->up()) return n.get();
      if (!fallback && n->owner) fallback = n.get();
    }
    return fallback ? fallback : nodes.empty() ? nullptr : nodes.front().get();
  }

  // The masters serving slots, in address order (SCAN's walk).
  std::vector<Node*> masters() const {
    std::vector<Node*> out;
    for (const auto& n : nodes) {
      if (n->owner) out.push_back(n.get());
    }
    std::sort(out.begin(), out.end(), [](const Node* a, const Node* b) { return a->name < b->name; });
    return out;
  }
};

namespace {

using Node = RedisConnection::Cluster::Node;

// CLUSTER SLOTS: [[start, end, [host, port, id...], [replica host, port, id...]...]...]
// into the map. An error, or "".
std::string apply_slots(RedisConnection::Cluster& c, const RedisReply& r, const Node& asked) {
  if (r.type != RedisReply::Type::array) return "unexpected answer to CLUSTER SLOTS";
  std::array<Node*, kSlots> map{};
  std::size_t covered = 0;
  auto at = [&](const RedisReply& n) -> Node* {
    if (n.type != RedisReply::Type::array || n.elements.size() < 2 || n.elements[0].type != RedisReply::Type::string ||
        n.elements[1].type != RedisReply::Type::integer || n.elements[1].integer <= 0 || n.elements[1].integer > 65535) {
      return nullptr;
    }
    // An empty host (or "?") is the address the question went to.
    const std::string& h = n.elements[0].str;
    return &c.node(h.empty() || h == "?" ? asked.at.host : h, static_cast<std::uint16_t>(n.elements[1].integer));
  };
  for (const auto& range : r.elements) {
    const auto& e = range.elements;
    if (range.type != RedisReply::Type::array || e.size() < 3 || e[0].type != RedisReply::Type::integer ||
        e[1].type != RedisReply::Type::integer || e[0].integer < 0 || e[1].integer >= static_cast<std::int64_t>(kSlots) ||
        e[0].integer > e[1].integer) {
      return "unexpected slot range in CLUSTER SLOTS";
    }
    Node* master = at(e[2]);
    if (!master) return "unexpected node in CLUSTER SLOTS";
    for (std::size_t i = 3; i < e.size(); ++i) at(e[i]);  // replicas: connected beforehand
    for (auto s = e[0].integer; s <= e[1].integer; ++s) {
      if (!map[static_cast<std::size_t>(s)]) ++covered;
      map[static_cast<std::size_t>(s)] = master;
    }
  }
  c.slots = map;
  for (auto& n : c.nodes) n->owner.store(std::find(map.begin(), map.end(), n.get()) != map.end());
  c.complete.store(covered == kSlots);
  c.mapped.store(true);
  return covered == kSlots ? "" : std::to_string(kSlots - covered) + " slots served by no node";
}

// Reads the map from the first node that answers: those serving slots first.
awaitable<void> read_map(std::shared_ptr<RedisConnection::Cluster> c) {
  c->last_read = Clock::now();
  std::vector<Node*> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& n : c->nodes) {
      if (n->conn->up() && n->owner.load() == (pass == 0)) order.push_back(n.get());
    }
  }
  if (order.empty()) {
    std::string why;
    for (auto& n : c->nodes) {
      const std::string e = n->conn->last_error();
      why += (why.empty() ? "" : "; ") + n->name + ": " + (e.empty() ? std::string("connecting") : e);
    }
    c->set_error("no cluster node reachable (" + why + ")");
    co_return;
  }
  std::string why;
  for (std::size_t i = 0; i < order.size() && i < 3; ++i) {
    Node* n = order[i];
    std::vector<std::string> argv{"CLUSTER", "SLOTS"};
    RedisResult r = co_await n->conn->command(std::move(argv));
    if (c->stopped) co_return;
    if (r.ok() && !r.reply->is_error()) {
      c->set_error(apply_slots(*c, *r.reply, *n));
      co_return;
    }
    why += (why.empty() ? "" : "; ") + n->name + ": " + (r.ok() ? r.reply->str : r.error);
  }
  c->set_error("reading the slot map: " + why);
}

bool whole_and_up(const RedisConnection::Cluster& c) {
  if (!c.mapped.load() || !c.complete.load()) return false;
  for (const auto& n : c.nodes) {
    if (n->owner.load() && !n->conn->up()) return false;
  }
  return true;
}

awaitable<void> maintain(std::shared_ptr<RedisConnection::Cluster> c) {
  while (!c->stopped) {
    c->poked = false;
    co_await read_map(c);
    if (c->stopped) co_return;
    // Soon while the map is not whole or a node serving slots is down (a failover), else
    // every 5 s; a poke brings it forward.
    const ms wait = whole_and_up(*c) ? ms(5000) : c->mapped.load() ? ms(250) : ms(50);
    if (!c->poked) {
      c->timer.expires_after(wait);
      co_await c->timer.async_wait(nothrow);
      if (c->stopped) co_return;
    }
    const auto next = c->last_read + ms(100);
    if (Clock::now() < next) {
      c->pause.expires_at(next);
      co_await c->pause.async_wait(nothrow);
    }
  }
}

// "MOVED 3999 127.0.0.1:6381" / "ASK ...": the slot and where; false when it is not one.
bool redirect(const std::string& e, const Node& from, bool& ask, std::size_t& slot, RedisHost& to) {
  if (e.starts_with("MOVED ")) ask = false;
  else if (e.starts_with("ASK ")) ask = true;
  else return false;
  const std::string_view rest = std::string_view(e).substr(ask ? 4 : 6);
  const auto space = rest.find(' ');
  if (space == std::string_view::npos) return false;
  const std::string_view s = rest.substr(0, space), addr = rest.substr(space + 1);
  auto [p1, e1] = std::from_chars(s.data(), s.data() + s.size(), slot);
  const auto colon = addr.rfind(':');
  if (e1 != std::errc() || p1 != s.data() + s.size() || slot >= kSlots || colon == std::string_view::npos) return false;
  std::uint16_t port = 0;
  const std::string_view ps = addr.substr(colon + 1);
  auto [p2, e2] = std::from_chars(ps.data(), ps.data() + ps.size(), port);
  if (e2 != std::errc() || p2 != ps.data() + ps.size() || port == 0) return false;
  std::string_view host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  to = RedisHost{host.empty() ? from.at.host : std::string(host), port};
  return true;
}

awaitable<void> sleep_for(net::any_io_executor ex, ms d) {
  net::steady_timer t(ex);
  t.expires_after(d);
  co_await t.async_wait(nothrow);
}

// Waits (up to the command timeout) for a node's first connection attempt to end: a node
// just learned of, from a redirect or a new map.
awaitable<void> wait_connected(const std::shared_ptr<RedisConnection::Cluster>& c, const Node& n) {
  const auto until = Clock::now() + c->opt.command_timeout;
  while (!c->stopped && !n.conn->up() && n.conn->last_error().empty() && Clock::now() < until) {
    co_await sleep_for(c->ex, ms(2));
  }
}

// One command (or script) to the node serving `slot` (-1: any), following redirects.
awaitable<RedisResult> routed(std::shared_ptr<RedisConnection::Cluster> c, const std::vector<std::string>& argv,
                              int slot, const RedisScript* script, const std::vector<std::string>& keys,
                              const std::vector<std::string>& args) {
  Node* target = slot >= 0 ? c->slots[static_cast<std::size_t>(slot)] : c->any_node();
  bool asking = false;
  for (int hop = 0;; ++hop) {
    if (!target) {
      c->poke();
      co_return RedisResult{std::nullopt, "not connected: no node serves slot " + std::to_string(slot) +
                                              " (the cluster's slot map is being read again)"};
    }
    if (!target->conn->up() && target->conn->last_error().empty()) co_await wait_connected(c, *target);
    RedisResult r;
    if (script) {
      std::vector<std::string> k = keys, a = args;
      r = co_await target->conn->eval(*script, std::move(k), std::move(a), asking);
    } else {
      std::vector<std::string> v = argv;
      r = co_await target->conn->command(std::move(v), asking);
    }
    if (c->stopped) co_return r;
    if (!r.ok()) {
      c->poke();  // a node down or slow: the map may have changed (a failover)
      co_return r;
    }
    if (!r.reply->is_error() || hop >= kMaxRedirects) co_return r;
    const std::string& e = r.reply->str;
    bool ask = false;
    std::size_t moved_slot = 0;
    RedisHost to;
    if (redirect(e, *target, ask, moved_slot, to)) {
      Node& next = c->node(to.host, to.port);
      if (!ask) {
        c->slots[moved_slot] = &next;
        next.owner.store(true);
        c->poke();
      }
      asking = ask;
      target = &next;
      continue;
    }
    if (e.starts_with("TRYAGAIN")) {
      co_await sleep_for(c->ex, ms(20 * (hop + 1)));
      continue;
    }
    if (e.starts_with("CLUSTERDOWN")) c->poke();
    co_return r;
  }
}

RedisResult answer(RedisReply r) { return RedisResult{std::move(r), {}}; }

RedisResult error_reply(std::string text) {
  RedisReply r;
  r.type = RedisReply::Type::error;
  r.str = std::move(text);
  return answer(std::move(r));
}

// The command's key's slot: -1 when it has none, -2 when its keys span slots.
int slot_of(const std::string& cmd, const std::vector<std::string>& argv) {
  if (cmd == "EVAL" || cmd == "EVALSHA" || cmd == "EVAL_RO" || cmd == "EVALSHA_RO" || cmd == "FCALL" || cmd == "FCALL_RO") {
    std::size_t n = 0;
    if (argv.size() < 3) return -1;
    auto [p, ec] = std::from_chars(argv[2].data(), argv[2].data() + argv[2].size(), n);
    if (ec != std::errc() || n == 0 || argv.size() < 3 + n) return -1;
    const int s = key_slot(argv[3]);
    for (std::size_t i = 1; i < n; ++i) {
      if (key_slot(argv[3 + i]) != s) return -2;
    }
    return s;
  }
  if (cmd == "XREAD" || cmd == "XREADGROUP") {
    for (std::size_t i = 1; i + 1 < argv.size(); ++i) {
      if (upper(argv[i]) == "STREAMS") return key_slot(argv[i + 1]);
    }
    return -1;
  }
  static const std::array<std::string_view, 12> kNoKey{"PING", "PUBLISH", "INFO", "TIME", "CLUSTER", "ECHO",
                                                        "SCRIPT", "ROLE", "DBSIZE", "AUTH", "HELLO", "CLIENT"};
  for (auto k : kNoKey) {
    if (cmd == k) return -1;
  }
  return argv.size() > 1 ? key_slot(argv[1]) : -1;
}

// MGET, DEL, UNLINK, EXISTS over keys of several slots: one command per slot, the answers
// put back together (MGET's in the keys' order; the others' counts added).
awaitable<RedisResult> split(std::shared_ptr<RedisConnection::Cluster> c, const std::string& cmd,
                             std::vector<std::string> argv) {
  std::map<int, std::vector<std::size_t>> groups;  // slot -> indices in argv
  for (std::size_t i = 1; i < argv.size(); ++i) groups[key_slot(argv[i])].push_back(i);
  const bool mget = cmd == "MGET";
  RedisReply out;
  out.type = mget ? RedisReply::Type::array : RedisReply::Type::integer;
  if (mget) out.elements.resize(argv.size() - 1);
  for (const auto& [slot, idx] : groups) {
    std::vector<std::string> part{argv[0]};
    for (auto i : idx) part.push_back(argv[i]);
    static const std::vector<std::string> kNone;
    RedisResult r = co_await routed(c, part, slot, nullptr, kNone, kNone);
    if (!r.ok() || r.reply->is_error()) co_return r;
    if (mget) {
      if (r.reply->type != RedisReply::Type::array || r.reply->elements.size() != idx.size()) co_return r;
      for (std::size_t j = 0; j < idx.size(); ++j) out.elements[idx[j] - 1] = std::move(r.reply->elements[j]);
    } else {
      out.integer += r.reply->integer;
    }
  }
  co_return answer(std::move(out));
}

// SCAN over every master in turn. The cursor names the master ("<i>:<its cursor>");
// "0" starts and ends the walk. (A map that changes during the walk may skip keys or
// repeat some, as SCAN may on one server.)
awaitable<RedisResult> scan(std::shared_ptr<RedisConnection::Cluster> c, std::vector<std::string> argv) {
  const auto masters = c->masters();
  std::size_t at = 0;
  std::string cursor = "0";
  if (argv.size() < 2) co_return error_reply("ERR wrong number of arguments for 'scan' command");
  if (argv[1] != "0") {
    const auto colon = argv[1].find(':');
    auto [p, ec] = std::from_chars(argv[1].data(), argv[1].data() + argv[1].size(), at);
    if (colon == std::string::npos || ec != std::errc() || p != argv[1].data() + colon) co_return error_reply("ERR invalid cursor");
    cursor = argv[1].substr(colon + 1);
  }
  if (at >= masters.size()) {
    if (masters.empty()) co_return RedisResult{std::nullopt, "not connected: the cluster's slot map is not known yet"};
    co_return error_reply("ERR invalid cursor");
  }
  argv[1] = cursor;
  RedisResult r = co_await masters[at]->conn->command(std::move(argv));
  if (!r.ok() || r.reply->is_error() || r.reply->type != RedisReply::Type::array || r.reply->elements.size() != 2) {
    co_return r;
  }
  std::string& next = r.reply->elements[0].str;
  if (next != "0") next = std::to_string(at) + ":" + next;
  else if (at + 1 < masters.size()) next = std::to_string(at + 1) + ":0";
  co_return r;
}

}  // namespace

ClusterPtr make_cluster(net::any_io_executor ex, RedisEndpoint ep, RedisOptions opt) {
  auto c = std::make_shared<RedisConnection::Cluster>(std::move(ex), std::move(ep), opt);
  for (const auto& seed : c->ep.cluster) c->node(seed.host, seed.port);
  return c;
}

void cluster_start(const ClusterPtr& c) {
  if (c->started || c->stopped) return;
  c->started = true;
  for (auto& n : c->nodes) n->conn->start();
  net::co_spawn(c->ex, maintain(c), net::detached);
}

void cluster_stop(RedisConnection::Cluster& c) {
  if (c.stopped) return;
  c.stopped = true;
  c.timer.cancel();
  c.pause.cancel();
  for (auto& n : c.nodes) n->conn->stop();
}

awaitable<RedisResult> cluster_command(ClusterPtr c, std::vector<std::string> argv) {
  c->n_commands.fetch_add(1, std::memory_order_relaxed);
  RedisResult r;
  if (argv.empty()) {
    r.error = "empty command";
  } else if (c->stopped) {
    r.error = "stopped";
  } else if (!c->mapped.load()) {
    std::lock_guard lock(c->mu);
    r.error = "not connected: " + (c->map_error.empty() ? std::string("reading the cluster's slot map") : c->map_error);
  } else {
    const std::string cmd = upper(argv[0]);
    const int slot = slot_of(cmd, argv);
    if (cmd == "SCAN") {
      r = co_await scan(c, std::move(argv));
    } else if ((cmd == "MGET" || cmd == "DEL" || cmd == "UNLINK" || cmd == "EXISTS") && argv.size() > 2) {
      r = co_await split(c, cmd, std::move(argv));
    } else if (slot == -2) {
      r = error_reply("CROSSSLOT Keys in request don't hash to the same slot (sluice: a script's keys share one hash tag)");
    } else {
      static const std::vector<std::string> kNone;
      r = co_await routed(c, argv, slot, nullptr, kNone, kNone);
    }
  }
  if (!r.ok()) c->n_failures.fetch_add(1, std::memory_order_relaxed);
  co_return r;
}

awaitable<RedisResult> cluster_eval(ClusterPtr c, const RedisScript& script, std::vector<std::string> keys,
                                    std::vector<std::string> args) {
  c->n_commands.fetch_add(1, std::memory_order_relaxed);
  RedisResult r;
  int slot = keys.empty() ? -1 : key_slot(keys[0]);
  for (const auto& k : keys) {
    if (key_slot(k) != slot) slot = -2;
  }
  if (c->stopped) {
    r.error = "stopped";
  } else if (!c->mapped.load()) {
    std::lock_guard lock(c->mu);
    r.error = "not connected: " + (c->map_error.empty() ? std::string("reading the cluster's slot map") : c->map_error);
  } else if (slot == -2) {
    r = error_reply("CROSSSLOT Keys in request don't hash to the same slot (sluice: a script's keys share one hash tag)");
  } else {
    static const std::vector<std::string> kNone;
    r = co_await routed(c, kNone, slot, &script, keys, args);
  }
  if (!r.ok()) c->n_failures.fetch_add(1, std::memory_order_relaxed);
  co_return r;
}

bool cluster_up(const RedisConnection::Cluster& c) {
  std::lock_guard lock(c.mu);
  return whole_and_up(c);
}

std::string cluster_last_error(const RedisConnection::Cluster& c) {
  std::lock_guard lock(c.mu);
  if (!c.mapped.load()) return c.map_error.empty() ? "reading the cluster's slot map" : c.map_error;
  for (const auto& n : c.nodes) {
    if (n->owner.load() && !n->conn->up()) {
      const std::string e = n->conn->last_error();
      return "node " + n->name + " (serves slots): " + (e.empty() ? std::string("connecting") : e);
    }
  }
  return c.map_error;
}

std::uint64_t cluster_commands(const RedisConnection::Cluster& c) { return c.n_commands.load(std::memory_order_relaxed); }
std::uint64_t cluster_failures(const RedisConnection::Cluster& c) { return c.n_failures.load(std::memory_order_relaxed); }

std::uint64_t cluster_stat(const RedisConnection::Cluster& c, std::uint64_t (RedisConnection::*stat)() const) {
  std::lock_guard lock(c.mu);
  std::uint64_t sum = 0;
  for (const auto& n : c.nodes) sum += ((*n->conn).*stat)();
  return sum;
}

}  // namespace sluice::store
