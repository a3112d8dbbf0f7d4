// What model servers and the fleet's Redis send the gateway beside answers: a vLLM
// /metrics page and an Ollama /api/ps (load signals), an embedding answer (the semantic
// cache's vector), a batched embeddings answer split back per request, and the semantic
// stream's fields. Whatever the bytes, nothing crashes or loops; a load reading is a
// share within [0, 1] (or unknown); a vector read is of unit length; each split answer is
// JSON holding as many vectors as its request's inputs.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/semantic.hpp"
#include "fuzz_util.hpp"
#include "llm/embeddings.hpp"
#include "upstream/load.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t which = in.byte() % 5;
  const std::size_t a = in.byte() % 4 + 1, b = in.byte() % 4;
  const std::string_view text = in.rest();
  switch (which) {
    case 0: {
      if (auto r = upstream::read_vllm_metrics(text); r && (r->kv > 1.0 || (r->kv < 0 && r->kv != -1))) __builtin_trap();
      break;
    }
    case 1: {
      if (auto r = upstream::read_ollama_ps(text, 1 << 30); r && (r->kv > 1.0 || r->kv < 0)) __builtin_trap();
      break;
    }
    case 2: {
      if (auto v = cache::read_embedding(text)) {
        double n = 0;
        for (float x : *v) n += static_cast<double>(x) * x;
        if (std::fabs(n - 1.0) > 1e-3) __builtin_trap();
      }
      break;
    }
    case 3: {
      const std::size_t counts[] = {a, b};
      const std::int64_t weights[] = {static_cast<std::int64_t>(a) * 3, static_cast<std::int64_t>(b)};
      for (auto wire : {config::Provider::openai, config::Provider::ollama}) {
        auto parts = llm::split_embeddings_answer(wire, text, counts, weights);
        if (!parts) continue;
        if (parts->size() != 2) __builtin_trap();
        for (const auto& p : *parts) fuzz::expect_json(p, "a split embeddings answer");
      }
      break;
    }
    default: {
      // Fields separated by NUL bytes, as XREAD returns them.
      std::vector<std::string> fv;
      std::string cur;
      for (char c : text) {
        if (c == '\0') {
          fv.push_back(cur);
          cur.clear();
        } else {
          cur += c;
        }
      }
      fv.push_back(cur);
      if (auto r = cache::decode_fields(fv)) {
        auto back = cache::decode_fields(cache::encode_fields(*r));
        if (!back || back->hash != r->hash || back->vector.size() != r->vector.size()) __builtin_trap();
      }
    }
  }
  return 0;
}
