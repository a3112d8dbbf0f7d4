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
const std::vector<std::string> kNone;  // no argv (a script), or no script keys and args
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
    std::unique_ptr<RedisConnection> conn;  // replaced (under mu) when a retired node returns
    std::atomic<bool> owner{false};  // serves slots in the map now
    bool seed = false;               // from the URL: kept, named by a map or not
    bool retired = false;            // named by no map since: its connection stopped
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
  std::size_t covered = 0;              // slots the map in use serves (executor only)
  std::size_t turn = 0;                 // which node is asked first for the map
  bool started = false, stopped = false, poked = false;
  Clock::time_point last_read{};
  std::atomic<std::uint64_t> n_commands{0}, n_failures{0};

  std::unique_ptr<RedisConnection> connect(const RedisHost& at) const {
    RedisEndpoint e;
    e.host = at.host;
    e.port = at.port;
    e.username = ep.username;
    e.password = ep.password;
    auto conn = std::make_unique<RedisConnection>(ex, std::move(e), opt);
    if (started) conn->start();
    return conn;
  }

  // The node at host:port, made (and connected) when first named, connected again when a
  // retired one is named again.
  Node& node(const std::string& host, std::uint16_t port) {
    std::string name = host_port(host, port);
    for (auto& n : nodes) {
      if (n->name != name) continue;
      if (n->retired) {
        auto conn = connect(n->at);
        std::lock_guard lock(mu);
        n->conn = std::move(conn);  // (a command still on the old one ends "stopped")
        n->retired = false;
      }
      return *n;
    }
    auto n = std::make_unique<Node>();
    n->at = RedisHost{host, port};
    n->name = std::move(name);
    n->conn = connect(n->at);
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

// One CLUSTER SLOTS answer, read but not applied.
struct SlotMap {
  struct Range {
    std::size_t from = 0, to = 0;
    RedisHost master;
    std::vector<RedisHost> replicas;
  };
  std::vector<Range> ranges;
  std::size_t covered = 0;
};

// CLUSTER SLOTS: [[start, end, [host, port, id...], [replica host, port, id...]...]...]
// into `out`. An error, or "". A host given as "", "?" or nil (an unknown endpoint) is
// the address the question went to.
std::string parse_slots(const RedisReply& r, const Node& asked, SlotMap& out) {
  if (r.type != RedisReply::Type::array) return "unexpected answer to CLUSTER SLOTS";
  auto host = [&](const RedisReply& n, RedisHost& h) {
    if (n.type != RedisReply::Type::array || n.elements.size() < 2 || n.elements[1].type != RedisReply::Type::integer ||
        n.elements[1].integer <= 0 || n.elements[1].integer > 65535) {
      return false;
    }
    const auto& e = n.elements[0];
    if (e.type != RedisReply::Type::string && e.type != RedisReply::Type::nil) return false;
    h.host = e.type == RedisReply::Type::nil || e.str.empty() || e.str == "?" ? asked.at.host : e.str;
    h.port = static_cast<std::uint16_t>(n.elements[1].integer);
    return true;
  };
  std::vector<bool> seen(kSlots);
  for (const auto& range : r.elements) {
    const auto& e = range.elements;
    if (range.type != RedisReply::Type::array || e.size() < 3 || e[0].type != RedisReply::Type::integer ||
        e[1].type != RedisReply::Type::integer || e[0].integer < 0 || e[1].integer >= static_cast<std::int64_t>(kSlots) ||
        e[0].integer > e[1].integer) {
      return "unexpected slot range in CLUSTER SLOTS";
    }
    SlotMap::Range x;
    x.from = static_cast<std::size_t>(e[0].integer);
    x.to = static_cast<std::size_t>(e[1].integer);
    if (!host(e[2], x.master)) return "unexpected node in CLUSTER SLOTS";
    for (std::size_t i = 3; i < e.size(); ++i) {
      RedisHost h;
      if (!host(e[i], h)) return "unexpected replica in CLUSTER SLOTS";
      x.replicas.push_back(std::move(h));
    }
    for (auto slot = x.from; slot <= x.to; ++slot) {
      if (!seen[slot]) ++out.covered;
      seen[slot] = true;
    }
    out.ranges.push_back(std::move(x));
  }
  return "";
}

// The map in use from now: its nodes connected (replicas too: a promoted one is ready),
// nodes it no longer names (but the seeds) retired.
void apply_map(RedisConnection::Cluster& c, const SlotMap& m) {
  std::array<Node*, kSlots> map{};
  std::vector<const Node*> named;
  for (const auto& x : m.ranges) {
    Node* master = &c.node(x.master.host, x.master.port);
    named.push_back(master);
    for (const auto& h : x.replicas) named.push_back(&c.node(h.host, h.port));
    for (auto slot = x.from; slot <= x.to; ++slot) map[slot] = master;
  }
  c.slots = map;
  for (auto& n : c.nodes) {
    n->owner.store(std::find(map.begin(), map.end(), n.get()) != map.end());
    if (n->seed || n->retired || std::find(named.begin(), named.end(), n.get()) != named.end()) continue;
    n->retired = true;  // (its Node stays: a command under way may still name it)
    n->conn->stop();
  }
  c.covered = m.covered;
  c.complete.store(m.covered == kSlots);
  c.mapped.store(true);
}

// Reads the map from up to three nodes that answer (those serving slots first, a
// different one first each time), stopping at a whole map. The one covering the most
// slots is applied, unless it covers fewer than the map in use and only one node answered
// (a node just added, or restarted without its configuration, knows none).
awaitable<void> read_map(std::shared_ptr<RedisConnection::Cluster> c) {
  c->last_read = Clock::now();
  std::vector<Node*> order;
  for (int pass = 0; pass < 2; ++pass) {
    const auto first = order.size();
    for (auto& n : c->nodes) {
      if (!n->retired && n->conn->up() && n->owner.load() == (pass == 0)) order.push_back(n.get());
    }
    if (order.size() > first) {
      std::rotate(order.begin() + static_cast<std::ptrdiff_t>(first),
                  order.begin() + static_cast<std::ptrdiff_t>(first + c->turn % (order.size() - first)), order.end());
    }
  }
  ++c->turn;
  if (order.empty()) {
    std::string why;
    for (auto& n : c->nodes) {
      if (n->retired) continue;
      const std::string e = n->conn->last_error();
      why += (why.empty() ? "" : "; ") + n->name + ": " + (e.empty() ? std::string("connecting") : e);
    }
    c->set_error("no cluster node reachable (" + why + ")");
    co_return;
  }
  std::string why;
  SlotMap best;
  std::string best_from;
  int answers = 0;
  for (std::size_t i = 0; i < order.size() && i < 3 && best.covered < kSlots; ++i) {
    Node* n = order[i];
    std::vector<std::string> argv{"CLUSTER", "SLOTS"};
    RedisResult r = co_await n->conn->command(std::move(argv));
    if (c->stopped) co_return;
    SlotMap m;
    std::string err = !r.ok() ? r.error : r.reply->is_error() ? r.reply->str : parse_slots(*r.reply, *n, m);
    if (!err.empty()) {
      why += (why.empty() ? "" : "; ") + n->name + ": " + err;
      continue;
    }
    ++answers;
    if (answers == 1 || m.covered > best.covered) {
      best = std::move(m);
      best_from = n->name;
    }
  }
  if (answers == 0) {
    c->set_error("reading the slot map: " + why);
    co_return;
  }
  if (best.covered < c->covered && answers < 2) {
    c->set_error("a slot map from " + best_from + " serving " + std::to_string(best.covered) +
                 " slots was not taken (the one in use serves " + std::to_string(c->covered) + ")");
    co_return;
  }
  apply_map(*c, best);
  c->set_error(best.covered == kSlots ? "" : std::to_string(kSlots - best.covered) + " slots served by no node");
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
  to = RedisHost{host.empty() || host == "?" ? from.at.host : std::string(host), port};
  return true;
}

awaitable<void> sleep_for(net::any_io_executor ex, ms d) {
  net::steady_timer t(ex);
  t.expires_after(d);
  co_await t.async_wait(nothrow);
}

// Waits (until `until`) for a node's first connection attempt to end: a node just learned
// of, from a redirect or a new map.
awaitable<void> wait_connected(const std::shared_ptr<RedisConnection::Cluster>& c, const Node& n, Clock::time_point until) {
  while (!c->stopped && !n.conn->up() && n.conn->last_error().empty() && Clock::now() < until) {
    co_await sleep_for(c->ex, ms(5));
  }
}

// One command (or script) to the node serving `slot` (-1: any), following redirects, all
// within one command timeout. A script does not follow ASK: its undeclared keys (a
// window's counter) would be created afresh on the importing node; the ASK reply is its
// answer until the migration ends ("not now" to the rate limiter).
awaitable<RedisResult> routed(std::shared_ptr<RedisConnection::Cluster> c, const std::vector<std::string>& argv,
                              int slot, const RedisScript* script, const std::vector<std::string>& keys,
                              const std::vector<std::string>& args) {
  Node* target = slot >= 0 ? c->slots[static_cast<std::size_t>(slot)] : c->any_node();
  bool asking = false;
  const auto until = Clock::now() + c->opt.command_timeout;
  for (int hop = 0;; ++hop) {
    if (!target) {
      c->poke();
      co_return RedisResult{std::nullopt, "not connected: no node serves slot " + std::to_string(slot) +
                                              " (the cluster's slot map is being read again)"};
    }
    if (hop > 0 && Clock::now() >= until) {
      // (Every hop so far was refused unrun: nothing was done.)
      co_return RedisResult{std::nullopt, "not connected: still redirected after " + std::to_string(hop) +
                                              " tries within the command timeout"};
    }
    if (!target->conn->up() && target->conn->last_error().empty()) co_await wait_connected(c, *target, until);
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
      if (ask && script) co_return r;
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

// The commands, each routed to its slot's node, all at once; the answers in order.
awaitable<std::vector<RedisResult>> routed_all(std::shared_ptr<RedisConnection::Cluster> c,
                                               std::vector<std::vector<std::string>> parts, std::vector<int> slots) {
  const auto ex = c->ex;
  struct Fan {
    std::vector<RedisResult> results;
    std::size_t left;
    net::steady_timer done;
  };
  auto fan = std::make_shared<Fan>(Fan{std::vector<RedisResult>(parts.size()), parts.size(), net::steady_timer(ex)});
  fan->done.expires_at(net::steady_timer::time_point::max());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto one = [fan, c, i, part = std::move(parts[i]), slot = slots[i]]() -> awaitable<void> {
      try {
        fan->results[i] = co_await routed(c, part, slot, nullptr, kNone, kNone);
      } catch (const std::exception& e) {
        fan->results[i] = RedisResult{std::nullopt, std::string("internal error: ") + e.what()};
      }
      if (--fan->left == 0) fan->done.cancel();
    };
    net::co_spawn(ex, std::move(one), net::detached);
  }
  // (A part refused at once may have finished already: the timer's cancel then came first.)
  if (fan->left > 0) co_await fan->done.async_wait(nothrow);
  co_return std::move(fan->results);
}

// MGET, DEL, UNLINK, EXISTS over keys of several slots: one command per slot, at once, the
// answers put back together (MGET's in the keys' order; the others' counts added). A part
// that fails fails the whole (the other parts may have run: a DEL's keys are then partly
// deleted).
awaitable<RedisResult> split(std::shared_ptr<RedisConnection::Cluster> c, const std::string& cmd,
                             std::vector<std::string> argv) {
  std::map<int, std::vector<std::size_t>> groups;  // slot -> indices in argv
  for (std::size_t i = 1; i < argv.size(); ++i) groups[key_slot(argv[i])].push_back(i);
  std::vector<std::vector<std::string>> parts;
  std::vector<int> slots;
  for (const auto& [slot, idx] : groups) {
    std::vector<std::string> part{argv[0]};
    for (auto i : idx) part.push_back(argv[i]);
    parts.push_back(std::move(part));
    slots.push_back(slot);
  }
  auto results = co_await routed_all(c, std::move(parts), std::move(slots));
  const bool mget = cmd == "MGET";
  RedisReply out;
  out.type = mget ? RedisReply::Type::array : RedisReply::Type::integer;
  if (mget) out.elements.resize(argv.size() - 1);
  std::size_t g = 0;
  for (const auto& [slot, idx] : groups) {
    RedisResult& r = results[g++];
    if (!r.ok() || r.reply->is_error()) co_return std::move(r);
    if (mget) {
      if (r.reply->type != RedisReply::Type::array || r.reply->elements.size() != idx.size()) co_return std::move(r);
      for (std::size_t j = 0; j < idx.size(); ++j) out.elements[idx[j] - 1] = std::move(r.reply->elements[j]);
    } else {
      out.integer += r.reply->integer;
    }
  }
  co_return answer(std::move(out));
}

// SCAN over every master in turn, in address order. The cursor names the node being
// walked ("<host:port>/<its cursor>"); "0" starts and ends the walk. A master's keys are
// all seen if it serves its slots throughout; one that joins during the walk with an
// address before the current one is missed.
awaitable<RedisResult> scan(std::shared_ptr<RedisConnection::Cluster> c, std::vector<std::string> argv) {
  if (argv.size() < 2) co_return error_reply("ERR wrong number of arguments for 'scan' command");
  const auto masters = c->masters();
  if (masters.empty()) co_return RedisResult{std::nullopt, "not connected: the cluster's slot map is not known yet"};
  Node* at = masters.front();
  std::string cursor = "0";
  if (argv[1] != "0") {
    const auto slash = argv[1].rfind('/');
    if (slash == std::string::npos) co_return error_reply("ERR invalid cursor");
    const std::string name = argv[1].substr(0, slash);
    at = nullptr;
    for (auto& n : c->nodes) {
      if (n->name == name) at = n.get();
    }
    if (!at) co_return error_reply("ERR invalid cursor");
    cursor = argv[1].substr(slash + 1);
  }
  argv[1] = cursor;
  RedisResult r = co_await at->conn->command(std::move(argv));
  if (!r.ok() || r.reply->is_error() || r.reply->type != RedisReply::Type::array || r.reply->elements.size() != 2) {
    co_return r;
  }
  std::string& next = r.reply->elements[0].str;
  if (next != "0") {
    next = at->name + "/" + next;
  } else {
    const auto after = std::find_if(masters.begin(), masters.end(), [&](const Node* n) { return n->name > at->name; });
    if (after != masters.end()) next = (*after)->name + "/0";
  }
  co_return r;
}

}  // namespace

ClusterPtr make_cluster(net::any_io_executor ex, RedisEndpoint ep, RedisOptions opt) {
  auto c = std::make_shared<RedisConnection::Cluster>(std::move(ex), std::move(ep), opt);
  for (const auto& seed : c->ep.cluster) c->node(seed.host, seed.port).seed = true;
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
