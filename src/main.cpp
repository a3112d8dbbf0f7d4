// sluice: one binary, four commands.
//   sluice serve --config FILE     run the gateway (--takeover: share a port already served)
//   sluice sim [flags]             run the LLM upstream simulator
//   sluice check-config FILE       validate a configuration file
//   sluice config-reference        print the configuration reference (--write DOC: update
//                                  its tables in DOC, --check DOC: fail when DOC is stale)
#include <CLI/CLI.hpp>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/event_backend.hpp"
#include "config/reference.hpp"
#include "gateway/gateway.hpp"
#include "sim/sim.hpp"

int main(int argc, char** argv) {
  // An io_uring build on a kernel that refuses io_uring stops here, saying why.
  sluice::common::ensure_event_backend();
  // The simulator has its own flag set; hand it the rest of the command line.
  if (argc >= 2 && std::strcmp(argv[1], "sim") == 0) return sluice::sim::run_cli(argc - 1, argv + 1);

  CLI::App app{"sluice: an LLM gateway. Commands: serve, sim, check-config, config-reference."};
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
  std::string write_path, check_doc;
  auto* reference = app.add_subcommand("config-reference", "Print the configuration reference (Markdown tables)");
  reference->add_option("--write", write_path, "Update the generated tables of this document in place")
      ->check(CLI::ExistingFile);
  reference->add_option("--check", check_doc, "Fail when this document's generated tables are out of date")
      ->check(CLI::ExistingFile);
  app.add_subcommand("sim", "Run the LLM upstream simulator (see `sluice sim --help`)");
  CLI11_PARSE(app, argc, argv);

  if (reference->parsed()) {
    const std::string doc_path = !write_path.empty() ? write_path : check_doc;
    if (doc_path.empty()) {
      std::cout << sluice::config::reference_markdown();
      return 0;
    }
    std::ifstream in(doc_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    std::string error;
    const std::string updated = sluice::config::update_reference(text.str(), error);
    if (!error.empty()) {
      std::cerr << doc_path << ": " << error << "\n";
      return 1;
    }
    if (updated == text.str()) return 0;
    if (!check_doc.empty() && write_path.empty()) {
      std::cerr << doc_path << ": the configuration reference is out of date; run: sluice config-reference --write "
                << doc_path << "\n";
      return 1;
    }
    std::ofstream(doc_path, std::ios::binary | std::ios::trunc) << updated;
    std::cout << "updated " << doc_path << "\n";
    return 0;
  }

  if (serve->parsed()) return sluice::gateway::run_serve(config_path, takeover);
  if (check->parsed()) return sluice::gateway::run_check_config(check_path);
  return 2;
}
