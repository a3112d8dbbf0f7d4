#include "api/reencode.hpp"

#include <boost/json.hpp>

#include "llm/json_parse.hpp"

namespace sluice::api {

namespace json = boost::json;

bool ChunkReencoder::feed(std::string_view bytes, std::string& out) {
  frames_.clear();
  const bool ok = inner_->feed(bytes, frames_);
  convert(out);
  sync();
  return ok;
}

bool ChunkReencoder::finish(std::string& out) {
  frames_.clear();
  const bool ok = inner_->finish(frames_);
  convert(out);
  sync();
  return ok;
}

void ChunkReencoder::sync() {
  content_chunks_ = inner_->content_chunks();
  usage_ = inner_->usage();
  finish_reason_ = inner_->finish_reason();
  done_ = inner_->done();
  error_ = inner_->error();
}

// The inner translator's output: whole "data: ...\n\n" frames.
void ChunkReencoder::convert(std::string& out) {
  std::string_view rest = frames_;
  while (!rest.empty()) {
    const auto endf = rest.find("\n\n");
    std::string_view frame = rest.substr(0, endf);
    rest = endf == std::string_view::npos ? std::string_view{} : rest.substr(endf + 2);
    if (!frame.starts_with("data: ") || ended_) continue;
    frame.remove_prefix(6);
    if (frame == "[DONE]") {
      on_end(out);
      ended_ = true;
      continue;
    }
    boost::system::error_code ec;
    json::value v = llm::detail::parse_json(frame, ec);
    if (ec || !v.is_object()) continue;
    const auto& o = v.get_object();
    if (const auto* e = o.if_contains("error")) {
      std::string_view message = "upstream failed";
      if (const auto* m = e->is_object() ? e->get_object().if_contains("message") : nullptr; m && m->is_string()) {
        message = m->get_string();
      }
      on_error(out, message);
      ended_ = true;
      continue;
    }
    const auto* ch = o.if_contains("choices");
    if (!ch || !ch->is_array() || ch->get_array().empty()) continue;  // the usage chunk
    const auto* c0 = ch->get_array()[0].if_object();
    const auto* delta = c0 ? c0->if_contains("delta") : nullptr;
    const auto* d = delta ? delta->if_object() : nullptr;
    if (!d) continue;
    const auto* text = d->if_contains("content");
    if (text && text->is_string() && !text->get_string().empty()) on_text(out, text->get_string());
    if (const auto* tc = d->if_contains("tool_calls"); tc && tc->is_array()) {
      for (const auto& call : tc->get_array()) {
        const auto* co = call.if_object();
        if (!co) continue;
        ToolFragment f;
        f.index = calls_;
        if (const auto* i = co->if_contains("index"); i && i->is_int64()) f.index = i->get_int64();
        else ++calls_;
        auto str = [](const json::value* v) {
          return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
        };
        f.id = str(co->if_contains("id"));
        const auto* fn = co->if_contains("function");
        if (const auto* fo = fn ? fn->if_object() : nullptr) {
          f.name = str(fo->if_contains("name"));
          f.arguments = str(fo->if_contains("arguments"));
        }
        on_tool(out, f);
      }
    }
  }
}

}  // namespace sluice::api
