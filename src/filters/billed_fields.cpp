// Fields that bill or store on the operator's upstream account (`service_tier`, `store`,
// `web_search_options`; for a backend serving the client's API itself, built-in tools,
// files and stored prompts by id): refused unless the route lists them in allow_params.
// Generation requests only.
#include <algorithm>
#include <string>

#include "config/models.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "llm/chat.hpp"

namespace sluice::filters {

namespace {

class BilledFields final : public Filter {
 public:
  std::string_view name() const override { return "billed_fields"; }
  unsigned phases() const override { return bit(Phase::request); }

  Next on(Phase, Request& r, void*, Stop& stop) override {
    if (r.kind != Kind::generate) return Next::go;
    const auto& allowed = r.route.config->allow_params;
    auto refuse = [&](std::string_view what, std::string param) {
      if (std::find(allowed.begin(), allowed.end(), what) != allowed.end()) return false;
      stop.reason = Reason::option_not_allowed;
      stop.message = "'" + std::string(what) + "' is not allowed on model '" + r.chat.model +
                     "' (it bills or stores on the operator's account; a route allows it with allow_params)";
      stop.param = std::move(param);
      return true;
    };
    static constexpr std::string_view kBilled[] = {"service_tier", "store", "web_search_options"};
    for (std::string_view field : kBilled) {
      const auto* v = r.chat.body.if_contains(field);
      if (v && !v->is_null() && refuse(field, std::string(field))) return Next::stop;
    }
    // What a backend serving the client's API itself would do on the account (its
    // built-in tools, files and prompts by id), named by kind.
    for (const auto& b : r.chat.native_billed) {
      if (refuse(b.kind, b.param)) return Next::stop;
    }
    return Next::go;
  }
};

}  // namespace

std::unique_ptr<Filter> make_billed_fields(const Deps&) { return std::make_unique<BilledFields>(); }

}  // namespace sluice::filters
