#pragma once
// The base of a client API's stream encoder: it wraps the upstream adapter's translator
// (which writes chat.completion.chunk frames), reads each frame it writes, and calls the
// hooks with what happened: text, a tool call fragment, an error, the end. The counters
// (content chunks, usage, finish, errors, tokens relayed) stay the inner translator's.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "llm/chat.hpp"

namespace sluice::api {

// One element of a chunk's delta.tool_calls.
struct ToolFragment {
  std::int64_t index = 0;   // the call's index (its place when the upstream sent none)
  std::string_view id;      // the first fragment of a call names it
  std::string_view name;
  std::string_view arguments;  // a piece of the arguments (JSON text)
};

class ChunkReencoder : public llm::StreamTranslator {
 public:
  explicit ChunkReencoder(std::unique_ptr<llm::StreamTranslator> inner) : inner_(std::move(inner)) {}

  bool feed(std::string_view bytes, std::string& out) override;
  bool finish(std::string& out) override;
  // The inner translator sees the upstream's output: it counts it.
  void count_output(const tokenizer::Counter* counter, tokenizer::Encoding encoding) override {
    inner_->count_output(counter, encoding);
  }
  std::int64_t relayed_tokens() const override { return inner_->relayed_tokens(); }

 protected:
  virtual void on_text(std::string& out, std::string_view text) = 0;
  virtual void on_tool(std::string& out, const ToolFragment& fragment) = 0;
  virtual void on_error(std::string& out, std::string_view message) = 0;
  virtual void on_end(std::string& out) = 0;  // the upstream's answer is complete ([DONE])

  const llm::StreamTranslator& inner() const noexcept { return *inner_; }
  bool ended_ = false;  // nothing more is converted (the end or an error was written)

 private:
  void convert(std::string& out);
  void sync();

  std::unique_ptr<llm::StreamTranslator> inner_;
  std::string frames_;
  std::int64_t calls_ = 0;  // tool call fragments without an index count up from here
};

}  // namespace sluice::api
