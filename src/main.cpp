// sluice: one binary, three commands.
//   sluice serve --config FILE     run the gateway (--takeover: share a port already served)
//   sluice sim [flags]             run the LLM upstream simulator
//   sluice check-config FILE       validate a configuration file
#include <CLI/CLI.hpp>
#include <cstring>
#include <iostream>

#include "gateway/gateway.hpp"
#include "sim/sim.hpp"

int main(int argc, char** argv) {
  // The simulator has its own flag set; hand it the rest of the command line.
  if (argc >= 2 && std::strcmp(argv[1], "sim") == 0) return sluice::sim::run_cli(argc - 1, argv + 1);

  CLI::App app{"sluice: an LLM gateway. Commands: serve, sim, check-config."};
  app.require_subcommand(1);
  std::string config_path;
  auto* serve = app.add_subcommand("serve", "Run the gateway");
  serve->add_option("-c,--config", config_path, "YAML configuration file")->required()->check(CLI::ExistingFile);
  bool takeover = false;
  serve->add_flag("--takeover", takeover,
                  "Share the listen ports with a process already serving them (an in-place upgrade); "
                  "without it, a port already served is refused");
  std::string check_path;
  auto* check = app.add_subcommand("check-config", "Validate a configuration file and print the effective routes");
  check->add_option("file", check_path, "YAML configuration file")->required()->check(CLI::ExistingFile);
  app.add_subcommand("sim", "Run the LLM upstream simulator (see `sluice sim --help`)");
  CLI11_PARSE(app, argc, argv);

  if (serve->parsed()) return sluice::gateway::run_serve(config_path, takeover);
  if (check->parsed()) return sluice::gateway::run_check_config(check_path);
  return 2;
}
