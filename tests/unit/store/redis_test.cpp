// RedisConnection against a real redis-server (a child process per test, see
// redis_server.hpp). Each test body is a coroutine on a single-threaded io_context, like a
// gateway worker. Timing assertions are deliberately loose (seconds): the machine is shared.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "redis_fixture.hpp"

using namespace sluice::test;

TEST_F(RedisTest, RepliesOfEveryType) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisConnection c(co_await net::this_coro::executor, endpoint(*server), test_options());
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();

    auto pong = co_await c.command("PING");
    EXPECT_TRUE(is_status(pong, "PONG")) << show(pong);

    auto set = co_await c.command("SET", "k", std::string("a\0b\r\n$3\r\n", 9));  // binary-safe
    EXPECT_TRUE(is_status(set, "OK")) << show(set);
    auto get = co_await c.command("GET", "k");
    CO_REQUIRE(get.ok(), get.error);
    EXPECT_EQ(get.reply->type, Type::string);
    EXPECT_EQ(get.reply->str, std::string("a\0b\r\n$3\r\n", 9));

    co_await c.command("SET", "empty", "");
    auto empty = co_await c.command("GET", "empty");
    EXPECT_TRUE(empty.ok() && empty.reply->type == Type::string && empty.reply->str.empty()) << show(empty);

    auto nil = co_await c.command("GET", "missing");
    EXPECT_TRUE(nil.ok() && nil.reply->type == Type::nil) << show(nil);
    auto nil_array = co_await c.command("BLPOP", "missing", "0.01");  // "*-1"
    EXPECT_TRUE(nil_array.ok() && nil_array.reply->type == Type::nil) << show(nil_array);

    auto n = co_await c.command("INCRBY", "counter", "-42");
    EXPECT_TRUE(n.ok() && n.reply->type == Type::integer && n.reply->integer == -42) << show(n);

    auto err = co_await c.command("NOSUCHCOMMAND", "x");
    CO_REQUIRE(err.ok(), err.error);  // an error reply is an answer, not a transport failure
    EXPECT_EQ(err.reply->type, Type::error);
    EXPECT_TRUE(err.reply->is_error());
    EXPECT_EQ(err.reply->str.rfind("ERR unknown command", 0), 0u) << err.reply->str;
    auto wrongtype = co_await c.command("INCR", "k");
    EXPECT_TRUE(wrongtype.ok() && wrongtype.reply->is_error()) << show(wrongtype);

    auto none = co_await c.command("LRANGE", "missing", "0", "-1");
    EXPECT_TRUE(none.ok() && none.reply->type == Type::array && none.reply->elements.empty()) << show(none);

    // Nested arrays with every element type (Lua false -> nil).
    auto nested = co_await c.command(
        "EVAL", "return {1, 'two', {3, {'four', false}}, false, redis.status_reply('fine'), redis.error_reply('bad')}",
        "0");
    CO_REQUIRE(nested.ok(), nested.error);
    const auto& a = *nested.reply;
    CO_REQUIRE(a.type == Type::array, "");
    CO_REQUIRE(a.elements.size() == 6u, "");
    EXPECT_EQ(a.elements[0].type, Type::integer);
    EXPECT_EQ(a.elements[0].integer, 1);
    EXPECT_EQ(a.elements[1].type, Type::string);
    EXPECT_EQ(a.elements[1].str, "two");
    CO_REQUIRE(a.elements[2].type == Type::array, "");
    CO_REQUIRE(a.elements[2].elements.size() == 2u, "");
    EXPECT_EQ(a.elements[2].elements[0].integer, 3);
    CO_REQUIRE(a.elements[2].elements[1].type == Type::array, "");
    CO_REQUIRE(a.elements[2].elements[1].elements.size() == 2u, "");
    EXPECT_EQ(a.elements[2].elements[1].elements[0].str, "four");
    EXPECT_EQ(a.elements[2].elements[1].elements[1].type, Type::nil);
    EXPECT_EQ(a.elements[3].type, Type::nil);
    EXPECT_EQ(a.elements[4].type, Type::status);
    EXPECT_EQ(a.elements[4].str, "fine");
    EXPECT_EQ(a.elements[5].type, Type::error);
    EXPECT_NE(a.elements[5].str.find("bad"), std::string::npos) << a.elements[5].str;  // Redis 7 adds "ERR "

    // A value larger than one read: the reply arrives over many reads.
    std::string big(3 * 1024 * 1024, 'x');
    for (std::size_t i = 0; i < big.size(); i += 997) big[i] = static_cast<char>('a' + i % 26);
    co_await c.command("SET", "big", big);
    auto got = co_await c.command("GET", "big");
    EXPECT_TRUE(got.ok() && got.reply->str == big) << (got.ok() ? "different value" : got.error);

    auto none_argv = co_await c.command(std::vector<std::string>{});
    EXPECT_FALSE(none_argv.ok());
    EXPECT_EQ(none_argv.error, "empty command");

    EXPECT_TRUE(c.up());
    EXPECT_EQ(c.failures(), 1u);  // the empty command
    EXPECT_EQ(c.last_error(), "");
  });
}

TEST_F(RedisTest, TooDeeplyNestedReplyIsAProtocolErrorThenRecovers) {
  // hiredis 0.14 parses arrays nested at most 7 deep; deeper is a protocol error: the
  // stream cannot be resynchronized, so the connection is torn down and reconnects.
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisConnection c(co_await net::this_coro::executor, endpoint(*server), test_options());
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    auto seven = co_await c.command("EVAL", "return {{{{{{{1}}}}}}}", "0");
    EXPECT_TRUE(seven.ok() && seven.reply->type == Type::array) << show(seven);
    auto deep = co_await c.command("EVAL", "return {{{{{{{{{1}}}}}}}}}", "0");
    EXPECT_FALSE(deep.ok());
    EXPECT_EQ(deep.error.rfind("protocol error: ", 0), 0u) << deep.error;
    EXPECT_FALSE(c.up());
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    auto ok = co_await c.command("PING");
    EXPECT_TRUE(is_status(ok, "PONG")) << show(ok);
  });
}

TEST_F(RedisTest, PipelinesAThousandConcurrentCommandsInOrder) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisConnection c(co_await net::this_coro::executor, endpoint(*server), test_options());
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    const auto writes_before = c.writes();
    constexpr int kN = 1000;
    std::vector<std::int64_t> got(kN, -1);
    EXPECT_TRUE(co_await all(kN, [&](int i) -> awaitable<void> {
      auto r = co_await c.command("INCR", "n");
      if (r.ok() && r.reply->type == Type::integer) got[static_cast<std::size_t>(i)] = r.reply->integer;
    }));
    const auto writes = c.writes() - writes_before;
    std::printf("[          ] %d concurrent INCRs went out in %llu write(s)\n", kN,
                static_cast<unsigned long long>(writes));
    // Spawned in order, queued in order, answered in order: coroutine i gets i + 1.
    std::set<std::int64_t> distinct(got.begin(), got.end());
    EXPECT_EQ(distinct.size(), static_cast<std::size_t>(kN));
    for (int i = 0; i < kN; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], i + 1) << "coroutine " << i;
    EXPECT_LE(writes, 10u) << "commands issued in one loop turn should leave in one write";
    auto final_count = co_await c.command("GET", "n");
    EXPECT_TRUE(final_count.ok() && final_count.reply->str == "1000") << show(final_count);
    EXPECT_EQ(c.failures(), 0u);
    EXPECT_EQ(c.commands(), static_cast<std::uint64_t>(kN + 1));
  });
}

TEST_F(RedisTest, PipelineFullFailsFast) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisOptions opt = test_options();
    opt.max_pending = 10;
    RedisConnection c(co_await net::this_coro::executor, endpoint(*server), opt);
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    int ok = 0, full = 0;
    EXPECT_TRUE(co_await all(100, [&](int) -> awaitable<void> {
      auto r = co_await c.command("PING");
      if (r.ok()) ++ok;
      else if (r.error == "pipeline full") ++full;
    }));
    // All 100 are issued before the first write goes out: exactly max_pending fit.
    EXPECT_EQ(ok, 10);
    EXPECT_EQ(full, 90);
    EXPECT_TRUE(c.up()) << "a full pipeline is not a broken connection";
    auto r = co_await c.command("PING");
    EXPECT_TRUE(is_status(r, "PONG")) << show(r);
  });
}

TEST_F(RedisTest, EvalFallsBackToEvalOnNoscript) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisConnection c(co_await net::this_coro::executor, endpoint(*server), test_options());
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    const RedisScript script("return redis.call('INCRBY', KEYS[1], ARGV[1])");

    auto first = co_await c.eval(script, argv("s"), argv("5"));  // not loaded yet: EVALSHA, NOSCRIPT, EVAL
    EXPECT_TRUE(first.ok() && first.reply->type == Type::integer && first.reply->integer == 5) << show(first);
    auto second = co_await c.eval(script, argv("s"), argv("5"));  // loaded now: EVALSHA only
    EXPECT_TRUE(second.ok() && second.reply->integer == 10) << show(second);
    auto stats = co_await c.command("INFO", "commandstats");
    EXPECT_EQ(command_calls(stats, "evalsha"), 2);
    EXPECT_EQ(command_calls(stats, "eval"), 1);

    auto loaded = co_await c.command("SCRIPT", "LOAD", script.source);
    EXPECT_TRUE(loaded.ok() && loaded.reply->str == script.sha1) << show(loaded);

    auto flushed = co_await c.command("SCRIPT", "FLUSH");
    EXPECT_TRUE(is_status(flushed, "OK")) << show(flushed);
    // 50 concurrent evals all meet NOSCRIPT (pipelined before the first reply) and all recover.
    int good = 0;
    EXPECT_TRUE(co_await all(50, [&](int) -> awaitable<void> {
      auto r = co_await c.eval(script, argv("s"), argv("1"));
      if (r.ok() && r.reply->type == Type::integer) ++good;
    }));
    EXPECT_EQ(good, 50);
    auto value = co_await c.command("GET", "s");
    EXPECT_TRUE(value.ok() && value.reply->str == "60") << show(value);
    auto after = co_await c.eval(script, argv("s"), argv("0"));
    EXPECT_TRUE(after.ok() && after.reply->integer == 60) << show(after);
    EXPECT_EQ(c.failures(), 0u);
  });
}

TEST_F(RedisTest, ScriptErrorsAreErrorReplies) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisConnection c(co_await net::this_coro::executor, endpoint(*server), test_options());
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    auto explicit_error = co_await c.eval(RedisScript("return redis.error_reply('over limit')"), argv(), argv());
    CO_REQUIRE(explicit_error.ok(), explicit_error.error);
    EXPECT_TRUE(explicit_error.reply->is_error());
    EXPECT_EQ(explicit_error.reply->str, "over limit");

    auto runtime_error = co_await c.eval(RedisScript("error('boom')"), argv(), argv());
    CO_REQUIRE(runtime_error.ok(), runtime_error.error);
    EXPECT_TRUE(runtime_error.reply->is_error());
    EXPECT_NE(runtime_error.reply->str.find("boom"), std::string::npos) << runtime_error.reply->str;

    auto syntax_error = co_await c.eval(RedisScript("this is not lua"), argv(), argv());
    CO_REQUIRE(syntax_error.ok(), syntax_error.error);
    EXPECT_TRUE(syntax_error.reply->is_error()) << syntax_error.reply->str;

    auto bad_call = co_await c.eval(RedisScript("return redis.call('INCR', KEYS[1])"), argv("k"), argv());
    EXPECT_TRUE(bad_call.ok() && bad_call.reply->integer == 1) << show(bad_call);
    co_await c.command("SET", "k", "text");
    auto wrong = co_await c.eval(RedisScript("return redis.call('INCR', KEYS[1])"), argv("k"), argv());
    EXPECT_TRUE(wrong.ok() && wrong.reply->is_error()) << show(wrong);

    EXPECT_TRUE(c.up());
    EXPECT_EQ(c.failures(), 0u);
  });
}

TEST_F(RedisTest, AuthenticatesWithPasswordAndUser) {
  auto server = start_server({"--requirepass", "s3cret"});
  run([&]() -> awaitable<void> {
    auto ex = co_await net::this_coro::executor;
    RedisEndpoint ep = endpoint(*server);
    ep.password = "s3cret";
    RedisConnection c(ex, ep, test_options());
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    auto who = co_await c.command("ACL", "WHOAMI");
    EXPECT_TRUE(who.ok() && who.reply->str == "default") << show(who);
    auto created = co_await c.command("ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "+@all");
    EXPECT_TRUE(is_status(created, "OK")) << show(created);

    RedisEndpoint alice_ep = endpoint(*server);
    alice_ep.username = "alice";
    alice_ep.password = "alicepw";
    RedisConnection alice(ex, alice_ep, test_options());
    alice.start();
    EXPECT_TRUE(co_await wait_up(alice)) << alice.last_error();
    auto who2 = co_await alice.command("ACL", "WHOAMI");
    EXPECT_TRUE(who2.ok() && who2.reply->str == "alice") << show(who2);
  });
}

TEST_F(RedisTest, WrongOrMissingPasswordStaysDownWithAClearError) {
  auto server = start_server({"--requirepass", "s3cret"});
  run([&]() -> awaitable<void> {
    auto ex = co_await net::this_coro::executor;
    RedisEndpoint wrong_ep = endpoint(*server);
    wrong_ep.password = "wrong";
    RedisConnection wrong(ex, wrong_ep, test_options());
    RedisConnection missing(ex, endpoint(*server), test_options());
    wrong.start();
    missing.start();
    EXPECT_TRUE(co_await wait_until([&] { return !wrong.last_error().empty() && !missing.last_error().empty(); }, 10s));
    // Several attempts (reconnect_interval is 200 ms): it keeps trying and stays down.
    co_await sleep_for(700ms);
    EXPECT_FALSE(wrong.up());
    EXPECT_FALSE(missing.up());
    EXPECT_EQ(wrong.last_error().rfind("AUTH failed: WRONGPASS", 0), 0u) << wrong.last_error();
    EXPECT_EQ(missing.last_error().rfind("PING failed: NOAUTH", 0), 0u) << missing.last_error();
    auto r = co_await wrong.command("PING");
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.error.rfind("not connected: AUTH failed: WRONGPASS", 0), 0u) << r.error;
    EXPECT_EQ(wrong.reconnects(), 0u);
  });
}

TEST_F(RedisTest, SelectsTheDatabase) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    auto ex = co_await net::this_coro::executor;
    RedisEndpoint ep3 = endpoint(*server);
    ep3.db = 3;
    RedisConnection db3(ex, ep3, test_options());
    RedisConnection db0(ex, endpoint(*server), test_options());
    RedisEndpoint bad_ep = endpoint(*server);
    bad_ep.db = 999;  // default: 16 databases
    RedisConnection bad(ex, bad_ep, test_options());
    db3.start();
    db0.start();
    bad.start();
    EXPECT_TRUE(co_await wait_up(db3)) << db3.last_error();
    EXPECT_TRUE(co_await wait_up(db0)) << db0.last_error();
    co_await db3.command("SET", "where", "three");
    auto info = co_await db3.command("CLIENT", "INFO");
    EXPECT_TRUE(info.ok() && info.reply->str.find(" db=3 ") != std::string::npos) << show(info);
    auto in0 = co_await db0.command("GET", "where");
    EXPECT_TRUE(in0.ok() && in0.reply->type == Type::nil) << show(in0);
    auto in3 = co_await db0.command("EVAL", "redis.call('SELECT', 3) return redis.call('GET', 'where')", "0");
    EXPECT_TRUE(in3.ok() && in3.reply->str == "three") << show(in3);

    EXPECT_TRUE(co_await wait_until([&] { return !bad.last_error().empty(); }, 10s));
    EXPECT_FALSE(bad.up());
    EXPECT_EQ(bad.last_error().rfind("SELECT failed: ERR DB index is out of range", 0), 0u) << bad.last_error();
  });
}

TEST_F(RedisTest, ResolvesHostNames) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisEndpoint ep = endpoint(*server);
    ep.host = "localhost";  // may resolve to ::1 first (refused: bound to 127.0.0.1), then 127.0.0.1
    RedisConnection c(co_await net::this_coro::executor, ep, test_options());
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    auto r = co_await c.command("PING");
    EXPECT_TRUE(is_status(r, "PONG")) << show(r);

    RedisEndpoint nowhere = ep;
    nowhere.host = "no-such-host.invalid";
    RedisConnection n(co_await net::this_coro::executor, nowhere, test_options());
    n.start();
    EXPECT_TRUE(co_await wait_until([&] { return !n.last_error().empty(); }, 10s));
    EXPECT_FALSE(n.up());
    EXPECT_NE(n.last_error().find("no-such-host.invalid"), std::string::npos) << n.last_error();
  });
}

TEST_F(RedisTest, DownAtStartFailsFastThenComesUpWhenRedisDoes) {
  run([&]() -> awaitable<void> {
    const auto port = RedisServer::free_port();
    RedisEndpoint ep;
    ep.port = port;
    RedisConnection c(co_await net::this_coro::executor, ep, test_options());
    auto before = co_await c.command("PING");
    EXPECT_EQ(before.error, "not connected: not started");
    c.start();
    EXPECT_TRUE(co_await wait_until([&] { return !c.last_error().empty(); }, 10s));
    EXPECT_NE(c.last_error().find("refused"), std::string::npos) << c.last_error();
    const auto t0 = Clock::now();
    auto r = co_await c.command("PING");
    EXPECT_LT(Clock::now() - t0, 3s) << "a command while down must not wait";
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.error.rfind("not connected: connecting to 127.0.0.1:", 0), 0u) << r.error;
    EXPECT_EQ(c.failures(), 2u);

    // Redis appears on that port: the connection comes up by itself.
    RedisServer late({}, port);
    EXPECT_EQ(late.start(), "");
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    auto ok = co_await c.command("PING");
    EXPECT_TRUE(is_status(ok, "PONG")) << show(ok);
    EXPECT_EQ(c.reconnects(), 0u) << "the first connection is not a reconnect";
  });
}

TEST_F(RedisTest, RedisKilledThenRestartedOnTheSamePort) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisOptions opt = test_options();
    opt.command_timeout = 20s;  // so a failure below is the lost connection, not a timeout
    opt.reconnect_interval = 500ms;
    RedisConnection c(co_await net::this_coro::executor, endpoint(*server), opt);
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();

    // Commands in flight when Redis dies: a BLPOP that Redis holds, and INCRs behind it.
    auto ex = co_await net::this_coro::executor;
    int done = 0;
    std::vector<std::string> errors;
    for (int i = 0; i < 10; ++i) {
      std::vector<std::string> argv{"INCR", "x"};
      if (i == 0) argv = {"BLPOP", "never", "0"};
      net::co_spawn(ex, c.command(argv), [&](std::exception_ptr, RedisResult r) {
        ++done;
        errors.push_back(r.error);
      });
    }
    co_await sleep_for(200ms);
    EXPECT_EQ(done, 0) << "the BLPOP should hold the pipeline";
    server->stop(SIGKILL);
    const auto killed = Clock::now();
    EXPECT_TRUE(co_await wait_until([&] { return done == 10; }, 5s));
    EXPECT_LT(Clock::now() - killed, 5s);
    EXPECT_FALSE(c.up());
    for (const auto& e : errors) EXPECT_EQ(e.rfind("connection lost", 0), 0u) << e;
    EXPECT_EQ(c.last_error().rfind("connection lost", 0), 0u) << c.last_error();

    auto fast = co_await c.command("PING");
    EXPECT_FALSE(fast.ok());
    EXPECT_EQ(fast.error.rfind("not connected: ", 0), 0u) << fast.error;

    // Reconnect attempts (every 0.5 s) meet a closed port.
    EXPECT_TRUE(co_await wait_until([&] { return c.last_error().find("refused") != std::string::npos; }, 5s))
        << c.last_error();
    EXPECT_FALSE(c.up());

    EXPECT_EQ(server->start(), "");  // same port
    const auto restarted = Clock::now();
    EXPECT_TRUE(co_await wait_up(c, 10s)) << c.last_error();
    // reconnect_interval (0.5 s) + connect; the margin is generous for a noisy machine.
    EXPECT_LT(Clock::now() - restarted, 5s);
    auto again = co_await c.command("INCR", "x");
    EXPECT_TRUE(again.ok() && again.reply->integer == 1) << show(again);
    EXPECT_EQ(c.reconnects(), 1u);
  });
}

TEST_F(RedisTest, UnansweredCommandTimesOutThenRecovers) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisOptions opt = test_options();
    opt.command_timeout = 250ms;
    opt.connect_timeout = 500ms;
    RedisConnection c(co_await net::this_coro::executor, endpoint(*server), opt);
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();

    // Redis answers CLIENT PAUSE, then holds every command for 1.5 s.
    auto paused = co_await c.command("CLIENT", "PAUSE", "1500", "ALL");
    EXPECT_TRUE(is_status(paused, "OK")) << show(paused);
    auto ex = co_await net::this_coro::executor;
    int behind = 0;
    net::co_spawn(ex, c.command("INCR", "y"), [&](std::exception_ptr, RedisResult r) {
      if (!r.ok()) ++behind;
    });
    auto r = co_await c.command("PING");
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.error, "timeout after 250ms");
    EXPECT_FALSE(c.up());
    EXPECT_EQ(c.last_error(), "timeout after 250ms");
    co_await sleep_for(10ms);
    EXPECT_EQ(behind, 1) << "every pending command fails with the connection";

    EXPECT_TRUE(co_await wait_up(c, 10s)) << c.last_error();
    auto ok = co_await c.command("PING");
    EXPECT_TRUE(is_status(ok, "PONG")) << show(ok);
    EXPECT_EQ(c.reconnects(), 1u);

    // A frozen server (SIGSTOP): the command times out, reconnects connect (the kernel
    // accepts) but the handshake times out, until it runs again.
    server->pause();
    auto frozen = co_await c.command("PING");
    EXPECT_EQ(frozen.error, "timeout after 250ms");
    EXPECT_TRUE(co_await wait_until([&] { return c.last_error() == "timeout after 500ms"; }, 10s))
        << c.last_error() << " (the handshake's timeout is connect_timeout)";
    EXPECT_FALSE(c.up());
    server->resume();
    EXPECT_TRUE(co_await wait_up(c, 10s)) << c.last_error();
    auto thawed = co_await c.command("PING");
    EXPECT_TRUE(is_status(thawed, "PONG")) << show(thawed);
  });
}

TEST_F(RedisTest, StopAndDestroyWithCommandsInFlight) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    auto ex = co_await net::this_coro::executor;
    RedisOptions opt = test_options();
    opt.command_timeout = 20s;
    auto c = std::make_unique<RedisConnection>(ex, endpoint(*server), opt);
    c->start();
    EXPECT_TRUE(co_await wait_up(*c)) << c->last_error();

    // Written and held by Redis (behind a BLPOP), and queued but not yet written.
    auto results = std::make_shared<std::vector<std::string>>();
    auto issue = [&](std::vector<std::string> argv) {
      net::co_spawn(ex, c->command(std::move(argv)), [results](std::exception_ptr e, RedisResult r) {
        results->push_back(e ? "exception" : r.ok() ? "ok" : r.error);
      });
    };
    issue({"BLPOP", "never", "0"});
    for (int i = 0; i < 100; ++i) issue({"INCR", "z"});
    co_await sleep_for(200ms);
    for (int i = 0; i < 100; ++i) issue({"INCR", "z"});
    co_await sleep_for(0ms);  // they start, queue and post a flush
    c->stop();
    c->stop();  // idempotent
    c.reset();  // destroyed with the flush and the read still queued
    EXPECT_TRUE(co_await wait_until([&] { return results->size() == 201; }, 5s));
    for (const auto& r : *results) EXPECT_EQ(r, "stopped");

    // Destroyed without stop(), commands pending, right after start (still connecting).
    auto d = std::make_unique<RedisConnection>(ex, endpoint(*server), opt);
    d->start();
    co_await sleep_for(0ms);
    d.reset();
  });
}

TEST_F(RedisTest, DestroyedWithTheLoopNeverRunAgain) {
  // The io_context dies with completions still queued: nothing leaks (LSan) or dangles.
  auto server = start_server();
  auto io = std::make_unique<net::io_context>();
  auto c = std::make_unique<RedisConnection>(io->get_executor(), endpoint(*server), test_options());
  c->start();
  const auto deadline = Clock::now() + 10s;
  while (!c->up() && Clock::now() < deadline) io->run_for(10ms);
  ASSERT_TRUE(c->up()) << c->last_error();
  int completed = 0;
  for (int i = 0; i < 20; ++i) {
    net::co_spawn(*io, c->command("BLPOP", "never", "0"), [&](std::exception_ptr, RedisResult) { ++completed; });
  }
  io->run_for(100ms);
  c.reset();
  io.reset();
  EXPECT_EQ(completed, 0);
}

// Not a test: a measurement. Run with
//   build/tests/unit/test_store --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'
// Prints ops/s for pipelined EVALSHA of a small script (and for INCR, for scale) from 64
// coroutines on one connection, and the client's own CPU per operation (this thread).
TEST_F(RedisTest, DISABLED_PipelinedEvalshaThroughput) {
  auto server = start_server();
  run([&]() -> awaitable<void> {
    RedisConnection c(co_await net::this_coro::executor, endpoint(*server), test_options());
    c.start();
    EXPECT_TRUE(co_await wait_up(c)) << c.last_error();
    const RedisScript script(
        "local n = redis.call('INCRBY', KEYS[1], ARGV[1]) "
        "if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], 60000) end return n");
    co_await c.eval(script, argv("warm"), argv("1"));
    constexpr int kWorkers = 64, kPerWorker = 5000;
    for (const bool use_eval : {true, false}) {
      const auto writes0 = c.writes();
      rusage ru0{}, ru1{};
      ::getrusage(RUSAGE_THREAD, &ru0);
      const auto t0 = Clock::now();
      int failures = 0;
      EXPECT_TRUE(co_await all(kWorkers, [&](int w) -> awaitable<void> {
        const std::string key = "rl:" + std::to_string(w % 16);
        for (int i = 0; i < kPerWorker; ++i) {
          RedisResult r;
          if (use_eval) r = co_await c.eval(script, argv(key), argv("1"));
          else r = co_await c.command("INCR", key);
          if (!r.ok() || r.reply->is_error()) ++failures;
        }
      }, 120s));
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      ::getrusage(RUSAGE_THREAD, &ru1);
      auto us = [](const timeval& t) { return t.tv_sec * 1e6 + t.tv_usec; };
      const double cpu_us = us(ru1.ru_utime) - us(ru0.ru_utime) + us(ru1.ru_stime) - us(ru0.ru_stime);
      const double ops = kWorkers * kPerWorker;
      std::printf("[          ] %d coroutines x %d %s: %.0f ops/s (%.2f s), %.1f commands per write, "
                  "client CPU %.2f us/op, %d failures\n",
                  kWorkers, kPerWorker, use_eval ? "EVALSHA" : "INCR", ops / secs, secs,
                  ops / static_cast<double>(c.writes() - writes0), cpu_us / ops, failures);
      EXPECT_EQ(failures, 0);
    }
  }, 300s);
}
