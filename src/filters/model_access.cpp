// Which models a key may use: keys[].models ("*" = all). Every kind of request.
#include <string>

#include "config/keys.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "llm/chat.hpp"

namespace sluice::filters {

namespace {

class ModelAccess final : public Filter {
 public:
  std::string_view name() const override { return "model_access"; }
  unsigned phases() const override { return bit(Phase::request); }

  Next on(Phase, Request& r, void*, Stop& stop) override {
    if (r.key.may_use(r.chat.model)) return Next::go;
    stop.reason = Reason::model_not_allowed;
    stop.message = "this API key may not use model '" + r.chat.model + "'";
    stop.param = "model";
    return Next::stop;
  }
};

}  // namespace

std::unique_ptr<Filter> make_model_access(const Deps&) { return std::make_unique<ModelAccess>(); }

}  // namespace sluice::filters
