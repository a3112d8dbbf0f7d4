// RedisConnection on a real Redis Cluster: three redis-servers (cluster-enabled, one master
// each, no replicas), their slots assigned and met through the client itself. The client
// is given one seed; it must find every node, follow a slot that moves (ASK while it
// migrates, MOVED once it has), split multi-key commands, walk SCAN over the masters, and
// keep serving the other slots while a node is down.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "redis_fixture.hpp"

using namespace sluice::test;

namespace {

constexpr int kNodes = 3;

class RedisClusterTest : public RedisTest {
 protected:
  // Starts the servers (not yet a cluster).
  void SetUp() override {
    RedisTest::SetUp();
    // (The bus on a port of its own: port + 10000 may not exist.)
    for (int i = 0; i < kNodes; ++i) nodes_.push_back(cluster_server());
  }

  RedisEndpoint seed(int i = 0) { return seeds({i}); }
  RedisEndpoint seeds(std::vector<int> which) {
    RedisEndpoint ep;
    for (int i : which) ep.cluster.push_back(sluice::RedisHost{"127.0.0.1", nodes_[static_cast<std::size_t>(i)]->port()});
    return ep;
  }
  // A server started cluster-enabled, like the others (not met: it knows no slot).
  std::unique_ptr<RedisServer> cluster_server() {
    bus_.push_back(std::to_string(RedisServer::free_port()));
    return start_server({"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout",
                         "5000", "--cluster-port", bus_.back()});
  }

  // Node i serves slots [i * 16384 / 3, (i + 1) * 16384 / 3): assigned, met, and waited
  // for until every node says the cluster is ok. `admin` gets a plain connection per node.
  awaitable<bool> form(std::vector<std::unique_ptr<RedisConnection>>& admin,
                       std::vector<std::pair<int, int>> ranges = {}) {
    if (ranges.empty()) {
      for (int i = 0; i < kNodes; ++i) ranges.emplace_back(i * 16384 / kNodes, (i + 1) * 16384 / kNodes - 1);
    }
    auto ex = co_await net::this_coro::executor;
    for (int i = 0; i < kNodes; ++i) {
      admin.push_back(std::make_unique<RedisConnection>(ex, endpoint(*nodes_[static_cast<std::size_t>(i)]), test_options()));
      admin.back()->start();
      if (!co_await wait_up(*admin.back())) co_return false;
    }
    for (int i = 0; i < kNodes; ++i) {
      const auto [first, last] = ranges[static_cast<std::size_t>(i)];
      const auto from = std::to_string(first), to = std::to_string(last);
      auto r = co_await admin[static_cast<std::size_t>(i)]->command("CLUSTER", "ADDSLOTSRANGE", from, to);
      if (!is_status(r, "OK")) {
        ADD_FAILURE() << "ADDSLOTSRANGE: " << show(r);
        co_return false;
      }
      auto id = co_await admin[static_cast<std::size_t>(i)]->command("CLUSTER", "MYID");
      ids_.push_back(id.ok() ? id.reply->str : "");
      // A config epoch of its own per node, as redis-cli gives them: two nodes on the same
      // epoch settle it by gossip later, and one bumped meanwhile can win back a slot
      // already given away (each node then sends the slot's commands to the other).
      auto epoch = co_await admin[static_cast<std::size_t>(i)]->command("CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1));
      if (!is_status(epoch, "OK")) {
        ADD_FAILURE() << "SET-CONFIG-EPOCH: " << show(epoch);
        co_return false;
      }
    }
    for (int i = 1; i < kNodes; ++i) {
      const auto at = static_cast<std::size_t>(i);
      auto r = co_await admin[0]->command("CLUSTER", "MEET", "127.0.0.1", std::to_string(nodes_[at]->port()), bus_[at]);
      if (!is_status(r, "OK")) {
        ADD_FAILURE() << "MEET: " << show(r);
        co_return false;
      }
    }
    for (auto& a : admin) {
      bool ok = false;
      for (int tries = 0; tries < 2000 && !ok; ++tries) {
        auto info = co_await a->command("CLUSTER", "INFO");
        ok = info.ok() && info.reply->str.find("cluster_state:ok") != std::string::npos;
        if (!ok) co_await sleep_for(10ms);
      }
      if (!ok) {
        ADD_FAILURE() << "the cluster never said cluster_state:ok";
        co_return false;
      }
    }
    co_return true;
  }

  // Gives `slot` (served by `from`) to `to` as a resharding tool does: `to` importing it,
  // then told first that it owns it (it bumps its config epoch, so its claim beats any
  // older one still in the gossip), then every other node; then waits until every node
  // names `to` as the owner.
  awaitable<bool> give_slot(std::vector<std::unique_ptr<RedisConnection>>& admin, std::uint16_t slot, std::size_t from,
                            std::size_t to) {
    const std::string s = std::to_string(slot);
    auto imp = co_await admin[to]->command("CLUSTER", "SETSLOT", s, "IMPORTING", ids_[from]);
    if (!is_status(imp, "OK")) {
      ADD_FAILURE() << "IMPORTING: " << show(imp);
      co_return false;
    }
    std::vector<std::size_t> order{to, from};
    for (std::size_t i = 0; i < admin.size(); ++i)
      if (i != to && i != from) order.push_back(i);
    for (auto i : order) {
      auto r = co_await admin[i]->command("CLUSTER", "SETSLOT", s, "NODE", ids_[to]);
      // (A node that lost its last slot by gossip already is a replica of the new owner.)
      const bool left = i == from && r.ok() && r.reply->str.find("only with masters") != std::string::npos;
      if (!is_status(r, "OK") && !left) {
        ADD_FAILURE() << "SETSLOT NODE on node " << i << ": " << show(r);
        co_return false;
      }
    }
    for (std::size_t i = 0; i < admin.size(); ++i) {
      std::string said;
      for (int tries = 0; tries < 500 && said != ids_[to]; ++tries) {
        if (tries > 0) co_await sleep_for(10ms);
        auto nodes = co_await admin[i]->command("CLUSTER", "NODES");
        said = nodes.ok() ? slot_owner(nodes.reply->str, slot) : "";
      }
      if (said != ids_[to]) {
        ADD_FAILURE() << "node " << i << " still says slot " << slot << " is served by '" << said << "'";
        co_return false;
      }
    }
    co_return true;
  }

  // The id of the node CLUSTER NODES' text names as serving `slot` ("" if none).
  static std::string slot_owner(const std::string& nodes, std::uint16_t slot) {
    std::istringstream lines(nodes);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::vector<std::string> f;
      for (std::string w; fields >> w;) f.push_back(w);
      for (std::size_t k = 8; k < f.size(); ++k) {
        if (f[k].starts_with('[')) continue;  // a slot migrating or importing
        const auto dash = f[k].find('-');
        const int first = std::stoi(f[k].substr(0, dash));
        const int last = dash == std::string::npos ? first : std::stoi(f[k].substr(dash + 1));
        if (slot >= first && slot <= last) return f[0];
      }
    }
    return "";
  }

  // The cluster formed, and a client from seed `i`, up; null (the failure reported) if not.
  awaitable<std::unique_ptr<RedisConnection>> ready(std::vector<std::unique_ptr<RedisConnection>>& admin, int i = 0) {
    if (!co_await form(admin)) co_return nullptr;
    auto c = std::make_unique<RedisConnection>(co_await net::this_coro::executor, seed(i), test_options());
    c->start();
    if (!co_await wait_up(*c)) {
      ADD_FAILURE() << "the cluster client never came up: " << c->last_error();
      co_return nullptr;
    }
    co_return c;
  }

  // Calls of `name` refused before running (a redirect), from INFO commandstats.
  static std::int64_t rejected_calls(const RedisResult& info, const std::string& name) {
    if (!info.ok()) return -1;
    const auto at = info.reply->str.find("cmdstat_" + name + ":");
    if (at == std::string::npos) return 0;
    const auto field = info.reply->str.find("rejected_calls=", at);
    return field == std::string::npos ? 0 : std::stoll(info.reply->str.substr(field + 15));
  }

  // Which node serves `slot` as formed.
  static int owner(std::uint16_t slot) { return static_cast<int>(slot) * kNodes / 16384; }

  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<std::string> bus_, ids_;
};

}  // namespace

TEST_F(RedisClusterTest, EveryKeyGoesToItsSlotsNodeFromOneSeed) {
  run([&]() -> awaitable<void> {
    std::vector<std::unique_ptr<RedisConnection>> admin;
    auto client = co_await ready(admin, 1);
    CO_REQUIRE(client, "no cluster, or no client up");
    RedisConnection& c = *client;
    EXPECT_TRUE(c.cluster());

    std::vector<std::string> keys;
    for (int i = 0; i < 60; ++i) keys.push_back("k" + std::to_string(i));
    for (const auto& k : keys) {
      auto r = co_await c.command("SET", k, "v" + k);
      EXPECT_TRUE(is_status(r, "OK")) << k << ": " << show(r);
    }
    // Each on its own slot's node, read directly there.
    std::array<int, kNodes> per_node{};
    for (const auto& k : keys) {
      const int n = owner(key_slot(k));
      ++per_node[static_cast<std::size_t>(n)];
      auto r = co_await admin[static_cast<std::size_t>(n)]->command("GET", k);
      EXPECT_TRUE(r.ok() && r.reply->str == "v" + k) << k << " on node " << n << ": " << show(r);
    }
    for (int n = 0; n < kNodes; ++n) {
      auto size = co_await admin[static_cast<std::size_t>(n)]->command("DBSIZE");
      EXPECT_EQ(size.ok() ? size.reply->integer : -1, per_node[static_cast<std::size_t>(n)]) << "node " << n;
      EXPECT_GT(per_node[static_cast<std::size_t>(n)], 0) << "the keys fall on every node";
    }

    // MGET over every slot: split by slot, the values back in the keys' order (a missing
    // key is nil in its place).
    std::vector<std::string> mget{"MGET"};
    for (const auto& k : keys) mget.push_back(k);
    mget.push_back("missing");
    auto all = co_await c.command(mget);
    CO_REQUIRE(all.ok() && all.reply->type == Type::array, show(all));
    CO_REQUIRE(all.reply->elements.size() == keys.size() + 1, all.reply->elements.size());
    for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(all.reply->elements[i].str, "v" + keys[i]);
    EXPECT_EQ(all.reply->elements.back().type, Type::nil);

    std::vector<std::string> exists{"EXISTS"}, del{"DEL"};
    for (const auto& k : keys) exists.push_back(k), del.push_back(k);
    auto e = co_await c.command(exists);
    EXPECT_EQ(e.ok() ? e.reply->integer : -1, static_cast<std::int64_t>(keys.size()));
    auto d = co_await c.command(del);
    EXPECT_EQ(d.ok() ? d.reply->integer : -1, static_cast<std::int64_t>(keys.size()));
    auto e2 = co_await c.command(exists);
    EXPECT_EQ(e2.ok() ? e2.reply->integer : -1, 0);
  });
}

TEST_F(RedisClusterTest, ScanWalksEveryMaster) {
  run([&]() -> awaitable<void> {
    std::vector<std::unique_ptr<RedisConnection>> admin;
    auto client = co_await ready(admin);
    CO_REQUIRE(client, "no cluster, or no client up");
    RedisConnection& c = *client;
    for (int i = 0; i < 300; ++i) {
      auto r = co_await c.command("SET", "scan:" + std::to_string(i), "x");
      CO_REQUIRE(is_status(r, "OK"), show(r));
    }
    co_await c.command("SET", "other", "x");
    std::set<std::string> seen;
    std::string cursor = "0";
    int calls = 0;
    do {
      auto r = co_await c.command("SCAN", cursor, "MATCH", "scan:*", "COUNT", "50");
      CO_REQUIRE(r.ok() && r.reply->type == Type::array && r.reply->elements.size() == 2, show(r));
      cursor = r.reply->elements[0].str;
      for (const auto& k : r.reply->elements[1].elements) seen.insert(k.str);
    } while (cursor != "0" && ++calls < 1000);
    EXPECT_EQ(seen.size(), 300u);
    auto bad = co_await c.command("SCAN", "9:0");
    EXPECT_TRUE(bad.ok() && bad.reply->is_error()) << show(bad);
  });
}

TEST_F(RedisClusterTest, ScriptsRunOnTheirSlotsNodeAndKeysOfTwoSlotsAreRefused) {
  run([&]() -> awaitable<void> {
    std::vector<std::unique_ptr<RedisConnection>> admin;
    auto client = co_await ready(admin);
    CO_REQUIRE(client, "no cluster, or no client up");
    RedisConnection& c = *client;
    const RedisScript incr("redis.call('INCRBY', KEYS[1], ARGV[1]); return redis.call('INCRBY', KEYS[2], ARGV[1])");
    for (const std::string tag : {"{a}", "{b}", "{c}", "{tenant:acme}"}) {
      auto r = co_await c.eval(incr, argv(tag + ":x", tag + ":y"), argv("2"));
      EXPECT_TRUE(r.ok() && r.reply->integer == 2) << tag << ": " << show(r);
      const int n = owner(key_slot(tag));
      auto direct = co_await admin[static_cast<std::size_t>(n)]->command("GET", tag + ":x");
      EXPECT_TRUE(direct.ok() && direct.reply->str == "2") << tag << ": " << show(direct);
    }
    const auto before = c.commands();
    auto cross = co_await c.eval(incr, argv("{a}:x", "{b}:x"), argv("1"));
    EXPECT_TRUE(cross.ok() && cross.reply->is_error() && cross.reply->str.starts_with("CROSSSLOT")) << show(cross);
    auto a = co_await admin[static_cast<std::size_t>(owner(key_slot("a")))]->command("GET", "{a}:x");
    EXPECT_TRUE(a.ok() && a.reply->str == "2") << "nothing ran: " << show(a);
    EXPECT_EQ(c.commands(), before + 1);
  });
}

TEST_F(RedisClusterTest, AMigratingSlotIsFollowedByAskThenByMoved) {
  run([&]() -> awaitable<void> {
    std::vector<std::unique_ptr<RedisConnection>> admin;
    auto client = co_await ready(admin);
    CO_REQUIRE(client, "no cluster, or no client up");
    RedisConnection& c = *client;
    const std::string old_key = "{moving}old", new_key = "{moving}new";
    const std::uint16_t slot = key_slot(old_key);
    const auto from = static_cast<std::size_t>(owner(slot)), to = (from + 1) % kNodes;
    auto set = co_await c.command("SET", old_key, "before");
    CO_REQUIRE(is_status(set, "OK"), show(set));
    const std::string s = std::to_string(slot);

    // Migrating: a key the old node no longer has is asked of the new one (ASK).
    auto imp = co_await admin[to]->command("CLUSTER", "SETSLOT", s, "IMPORTING", ids_[from]);
    auto mig = co_await admin[from]->command("CLUSTER", "SETSLOT", s, "MIGRATING", ids_[to]);
    CO_REQUIRE(is_status(imp, "OK") && is_status(mig, "OK"), show(imp) << " / " << show(mig));
    auto created = co_await c.command("SET", new_key, "asked");
    EXPECT_TRUE(is_status(created, "OK")) << show(created);
    auto on_new = co_await admin[to]->command("DBSIZE");
    EXPECT_EQ(on_new.ok() ? on_new.reply->integer : -1, 1) << "written on the importing node";
    auto got = co_await c.command("GET", new_key);
    EXPECT_TRUE(got.ok() && got.reply->str == "asked") << show(got);
    auto kept = co_await c.command("GET", old_key);
    EXPECT_TRUE(kept.ok() && kept.reply->str == "before") << "still on the old node: " << show(kept);

    // Moved: the key migrated, the slot given to the new node everywhere.
    const std::string port = std::to_string(nodes_[to]->port());
    auto moved = co_await admin[from]->command(argv("MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS", old_key));
    CO_REQUIRE(is_status(moved, "OK"), show(moved));
    CO_REQUIRE(co_await give_slot(admin, slot, from, to), "the slot never moved");
    auto info_before = co_await admin[from]->command("INFO", "commandstats");
    auto after = co_await c.command("GET", old_key);
    EXPECT_TRUE(after.ok() && after.reply->str == "before") << show(after);
    // The map learned from MOVED: the next commands for the slot go straight to the new node.
    for (int i = 0; i < 5; ++i) {
      auto r = co_await c.command("GET", new_key);
      EXPECT_TRUE(r.ok() && r.reply->str == "asked") << show(r);
    }
    auto info_after = co_await admin[from]->command("INFO", "commandstats");
    EXPECT_EQ(rejected_calls(info_after, "get") - rejected_calls(info_before, "get"), 1) << "one GET met MOVED, no more";
    EXPECT_EQ(command_calls(info_after, "get"), command_calls(info_before, "get")) << "none ran on the old node";
  });
}

TEST_F(RedisClusterTest, ANodeDownFailsItsSlotsAtOnceAndTheOthersServe) {
  run([&]() -> awaitable<void> {
    std::vector<std::unique_ptr<RedisConnection>> admin;
    auto client = co_await ready(admin);
    CO_REQUIRE(client, "no cluster, or no client up");
    RedisConnection& c = *client;
    // A key per node.
    std::map<int, std::string> key_of;
    for (int i = 0; key_of.size() < kNodes; ++i) key_of.emplace(owner(key_slot("n" + std::to_string(i))), "n" + std::to_string(i));

    admin[2].reset();
    nodes_[2]->stop(SIGKILL);
    // The client notices (its connection to node 2 is lost): down, and says which node.
    CO_REQUIRE(co_await wait_until([&] { return !c.up(); }, 10s), "still up");
    EXPECT_NE(c.last_error().find(std::to_string(nodes_[2]->port())), std::string::npos) << c.last_error();
    auto lost = co_await c.command("SET", key_of[2], "x");
    // Failed at once, unsent ("not connected"), not after a timeout.
    EXPECT_TRUE(!lost.ok() && lost.error.starts_with("not connected")) << show(lost);
    // (The cluster marks the slots' node failed after its node timeout, 5 s: until then the
    // others still serve their own slots.)
    for (int n = 0; n < 2; ++n) {
      auto r = co_await c.command("SET", key_of[n], "x");
      EXPECT_TRUE(is_status(r, "OK")) << "node " << n << ": " << show(r);
    }

    // Back on its port with its nodes.conf: it rejoins with its slots, and the client with it.
    CO_REQUIRE(nodes_[2]->start().empty(), "restart");
    CO_REQUIRE(co_await wait_up(c, 20s), c.last_error());
    // (CLUSTERDOWN until the node has met the others again.)
    RedisResult back;
    for (int tries = 0; tries < 400 && !is_status(back, "OK"); ++tries) {
      if (tries) co_await sleep_for(50ms);
      back = co_await c.command("SET", key_of[2], "y");
    }
    EXPECT_TRUE(is_status(back, "OK")) << show(back);
  });
}

TEST_F(RedisClusterTest, AScriptOnAMigratingSlotIsNotSentToTheImportingNode) {
  run([&]() -> awaitable<void> {
    std::vector<std::unique_ptr<RedisConnection>> admin;
    auto client = co_await ready(admin);
    CO_REQUIRE(client, "no cluster, or no client up");
    RedisConnection& c = *client;
    // Like the admission script: a declared counter name, a counter per window beside it.
    const RedisScript fw("return redis.call('INCR', KEYS[1] .. ':7')");
    const std::string key = "{t:acme}:k:a";
    auto r1 = co_await c.eval(fw, argv(key), argv());
    CO_REQUIRE(r1.ok() && r1.reply->integer == 1, show(r1));
    const std::uint16_t slot = key_slot(key);
    const auto from = static_cast<std::size_t>(owner(slot)), to = (from + 1) % kNodes;
    const std::string s = std::to_string(slot);
    auto imp = co_await admin[to]->command("CLUSTER", "SETSLOT", s, "IMPORTING", ids_[from]);
    auto mig = co_await admin[from]->command("CLUSTER", "SETSLOT", s, "MIGRATING", ids_[to]);
    CO_REQUIRE(is_status(imp, "OK") && is_status(mig, "OK"), show(imp));
    // The declared key does not exist: the old node says ASK. Followed, the count would
    // start from nothing on the importing node; the ASK is the answer instead.
    auto r2 = co_await c.eval(fw, argv(key), argv());
    EXPECT_TRUE(r2.ok() && r2.reply->is_error() && r2.reply->str.starts_with("ASK ")) << show(r2);
    auto there = co_await admin[to]->command("DBSIZE");
    EXPECT_EQ(there.ok() ? there.reply->integer : -1, 0) << "nothing counted on the importing node";
    // Plain commands still follow it.
    auto set = co_await c.command("SET", "{t:acme}:other", "x");
    EXPECT_TRUE(is_status(set, "OK")) << show(set);
  });
}

TEST_F(RedisClusterTest, ASeedThatKnowsNoSlotIsNotBelieved) {
  auto fresh = cluster_server();  // cluster-enabled, never met: CLUSTER SLOTS is empty
  run([&]() -> awaitable<void> {
    std::vector<std::unique_ptr<RedisConnection>> admin;
    CO_REQUIRE(co_await form(admin), "no cluster");
    RedisEndpoint ep;
    ep.cluster.push_back(sluice::RedisHost{"127.0.0.1", fresh->port()});
    for (int i = 0; i < kNodes; ++i) ep.cluster.push_back(seed(i).cluster[0]);
    RedisConnection c(co_await net::this_coro::executor, ep, test_options());
    c.start();
    CO_REQUIRE(co_await wait_up(c, 10s), "never up: " << c.last_error());
    auto r = co_await c.command("SET", "x", "1");
    EXPECT_TRUE(is_status(r, "OK")) << show(r);
  });
}

TEST_F(RedisClusterTest, AMapWithoutHostNamesIsTheAskedNodes) {
  run([&]() -> awaitable<void> {
    std::vector<std::unique_ptr<RedisConnection>> admin;
    CO_REQUIRE(co_await form(admin), "no cluster");
    // Nodes behind a balancer announce no endpoint: CLUSTER SLOTS names none (nil).
    for (auto& a : admin) {
      auto r = co_await a->command("CONFIG", "SET", "cluster-preferred-endpoint-type", "unknown-endpoint");
      CO_REQUIRE(is_status(r, "OK"), show(r));
    }
    RedisConnection c(co_await net::this_coro::executor, seed(), test_options());
    c.start();
    CO_REQUIRE(co_await wait_up(c, 10s), "never up: " << c.last_error());
    auto r = co_await c.command("SET", "x", "1");
    EXPECT_TRUE(is_status(r, "OK")) << show(r);
  });
}

TEST_F(RedisClusterTest, ScanKeepsItsPlaceWhenAMasterLeavesTheWalk) {
  run([&]() -> awaitable<void> {
    // The node first in address order serves one slot only (that of "lone"); then it gives
    // it away mid-walk, and the list of masters shrinks under the cursor.
    std::vector<std::size_t> order{0, 1, 2};
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return "127.0.0.1:" + std::to_string(nodes_[a]->port()) < "127.0.0.1:" + std::to_string(nodes_[b]->port());
    });
    const int lone = key_slot("lone");
    CO_REQUIRE(lone > 0 && lone < 16383, "slot");
    std::vector<std::pair<int, int>> ranges(kNodes);
    ranges[order[0]] = {lone, lone};
    ranges[order[1]] = {0, lone - 1};
    ranges[order[2]] = {lone + 1, 16383};
    std::vector<std::unique_ptr<RedisConnection>> admin;
    CO_REQUIRE(co_await form(admin, ranges), "no cluster");
    RedisConnection c(co_await net::this_coro::executor, seed(), test_options());
    c.start();
    CO_REQUIRE(co_await wait_up(c), c.last_error());
    for (int i = 0; i < 200; ++i) {
      auto r = co_await c.command("SET", "s" + std::to_string(i), "x");
      CO_REQUIRE(is_status(r, "OK"), show(r));
    }
    auto first = co_await c.command("SCAN", "0", "COUNT", "1000");
    CO_REQUIRE(first.ok() && first.reply->type == Type::array && first.reply->elements.size() == 2, show(first));
    std::set<std::string> seen;
    for (const auto& k : first.reply->elements[1].elements) seen.insert(k.str);
    std::string cursor = first.reply->elements[0].str;
    // "lone"'s slot to the second node, everywhere; a command for it meets MOVED and the
    // client reads the map again (the first node now serves nothing).
    CO_REQUIRE(co_await give_slot(admin, static_cast<std::uint16_t>(lone), order[0], order[1]), "the slot never moved");
    auto moved = co_await c.command("GET", "lone");
    EXPECT_TRUE(moved.ok() && !moved.reply->is_error()) << show(moved);
    co_await sleep_for(300ms);
    for (int calls = 0; cursor != "0" && calls < 100; ++calls) {
      auto r = co_await c.command("SCAN", cursor, "COUNT", "1000");
      CO_REQUIRE(r.ok() && r.reply->type == Type::array && r.reply->elements.size() == 2, show(r));
      cursor = r.reply->elements[0].str;
      for (const auto& k : r.reply->elements[1].elements) seen.insert(k.str);
    }
    EXPECT_EQ(seen.size(), 200u) << "every key, though the list of masters changed during the walk";
  });
}
