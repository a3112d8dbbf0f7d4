// kafka-mock: a librdkafka mock cluster on loopback, driven from stdin (docs/events.md).
//
//   kafka-mock --bootstrap-file F [--brokers N] [--topic T --partitions P]
//
// Writes the bootstrap servers to F (atomically: temp file + rename), then reads commands,
// one per line, answering one line each on stdout ("ok" or "error: ..."):
//   down <broker id|all>      close the broker's connections and refuse new ones
//   up <broker id|all>        accept connections again
//   rtt <broker id|all> <ms>  add a round-trip delay
// Exits 0 on stdin EOF, SIGTERM or SIGINT (and removes F).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <poll.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// "all" -> -1 (every broker), else an id in 1..brokers.
bool parse_broker(const std::string& s, int brokers, int& id) {
  if (s == "all") {
    id = -1;
    return true;
  }
  try {
    std::size_t used = 0;
    id = std::stoi(s, &used);
    return used == s.size() && id >= 1 && id <= brokers;
  } catch (...) {
    return false;
  }
}

std::string run_command(rd_kafka_mock_cluster_t* mc, int brokers, const std::string& line) {
  std::istringstream in(line);
  std::string cmd, who, extra;
  in >> cmd >> who;
  int id = 0;
  if (cmd != "down" && cmd != "up" && cmd != "rtt") return "error: unknown command (down|up|rtt)";
  if (!parse_broker(who, brokers, id)) return "error: broker must be 1.." + std::to_string(brokers) + " or all";
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  if (cmd == "rtt") {
    int ms = -1;
    if (!(in >> ms) || ms < 0) return "error: rtt <broker|all> <ms>";
    err = rd_kafka_mock_broker_set_rtt(mc, id, ms);
  } else if (cmd == "down") {
    err = rd_kafka_mock_broker_set_down(mc, id);
  } else {
    err = rd_kafka_mock_broker_set_up(mc, id);
  }
  if (in >> extra) return "error: too many arguments";
  return err ? std::string("error: ") + rd_kafka_err2str(err) : "ok";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"librdkafka mock cluster on loopback, driven by stdin commands: down|up <id|all>, rtt <id|all> <ms>"};
  int brokers = 1, partitions = 1;
  std::string topic, bootstrap_file;
  app.add_option("--brokers", brokers, "number of brokers (ids 1..N)")->check(CLI::Range(1, 32));
  app.add_option("--topic", topic, "create this topic");
  app.add_option("--partitions", partitions, "partitions of --topic")->check(CLI::Range(1, 1000));
  app.add_option("--bootstrap-file", bootstrap_file, "where to write the bootstrap servers")->required();
  CLI11_PARSE(app, argc, argv);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "4", err, sizeof err);  // not "no bootstrap.servers" (notice)
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);  // the cluster's owner
  if (!rk) {
    std::fprintf(stderr, "kafka-mock: %s\n", err);
    return 1;
  }
  rd_kafka_mock_cluster_t* mc = rd_kafka_mock_cluster_new(rk, brokers);
  if (!mc) {
    std::fprintf(stderr, "kafka-mock: could not create the mock cluster\n");
    rd_kafka_destroy(rk);
    return 1;
  }
  if (!topic.empty()) {
    if (auto e = rd_kafka_mock_topic_create(mc, topic.c_str(), partitions, 1)) {
      std::fprintf(stderr, "kafka-mock: topic %s: %s\n", topic.c_str(), rd_kafka_err2str(e));
      rd_kafka_mock_cluster_destroy(mc);
      rd_kafka_destroy(rk);
      return 1;
    }
  }
  const std::string bootstrap = rd_kafka_mock_cluster_bootstraps(mc);
  {
    const std::string tmp = bootstrap_file + ".tmp." + std::to_string(getpid());
    std::ofstream(tmp) << bootstrap << '\n';
    std::error_code ec;
    std::filesystem::rename(tmp, bootstrap_file, ec);
    if (ec) {
      std::fprintf(stderr, "kafka-mock: %s: %s\n", bootstrap_file.c_str(), ec.message().c_str());
      rd_kafka_mock_cluster_destroy(mc);
      rd_kafka_destroy(rk);
      return 1;
    }
  }
  std::fprintf(stderr, "kafka-mock: %d broker(s) at %s\n", brokers, bootstrap.c_str());

  std::string pending;
  char buf[4096];
  while (!g_stop) {
    pollfd pfd{STDIN_FILENO, POLLIN, 0};
    const int n = ::poll(&pfd, 1, 200);  // wakes up to notice signals
    if (n <= 0) continue;
    const ssize_t got = ::read(STDIN_FILENO, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF (or a broken stdin)
    pending.append(buf, static_cast<std::size_t>(got));
    for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      std::printf("%s\n", run_command(mc, brokers, line).c_str());
      std::fflush(stdout);
    }
  }
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  std::error_code ec;
  std::filesystem::remove(bootstrap_file, ec);
  return 0;
}
