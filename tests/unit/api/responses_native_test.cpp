// The Responses API passed to a backend that serves it itself: the call it gets, and its
// answer and events relayed with the gateway's ids and the client's own fields.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "api/responses.hpp"
#include "config/backend.hpp"

using namespace sluice;
using namespace sluice::api;
namespace json = boost::json;

namespace {

llm::ChatRequest request(std::string_view body) {
  auto conv = std::get<ResponsesConversion>(responses_to_chat(body));
  llm::ChatRequest req;
  req.model = "alias";
  req.stream = body.find("\"stream\":true") != std::string_view::npos;
  req.extra = std::move(conv.extra);
  req.native = std::move(conv.native);
  return req;
}

std::string suffix_of(const llm::ChatRequest& req) { return response_suffix(req); }

// The events of an SSE text, parsed.
std::vector<json::object> events(std::string_view sse) {
  std::vector<json::object> out;
  for (std::size_t at = sse.find("data: "); at != std::string_view::npos; at = sse.find("data: ", at)) {
    at += 6;
    const auto end = sse.find('\n', at);
    out.push_back(json::parse(sse.substr(at, end - at)).as_object());
  }
  return out;
}

std::string sse(std::string_view type, std::string_view data) {
  return "event: " + std::string(type) + "\ndata: " + std::string(data) + "\n\n";
}

TEST(ResponsesNative, TheCallIsTheClientsRequestForTheBackendsModelStoredNowhere) {
  auto req = request(R"({"model":"alias","input":"Hi","previous_response_id":"resp_x","store":true,
      "tools":[{"type":"web_search_preview"}],"include":["reasoning.encrypted_content"]})");
  config::Backend b;
  b.model = "gpt-real";
  b.path_prefix = "/v1";
  auto call = responses_native_call(req, b);
  EXPECT_EQ(call.target, "/v1/responses");
  auto body = json::parse(call.body).as_object();
  EXPECT_EQ(body["model"], "gpt-real");
  EXPECT_EQ(body["store"], false);
  EXPECT_FALSE(body.contains("previous_response_id"));  // the gateway's: resolved into the input
  EXPECT_EQ(body["tools"], json::parse(R"([{"type":"web_search_preview"}])"));
  EXPECT_EQ(body["include"], json::parse(R"(["reasoning.encrypted_content"])"));
  EXPECT_EQ(body["input"].as_array().size(), 1u);
}

TEST(ResponsesNative, AWholeAnswerCarriesTheGatewaysIdsAndTheClientsFields) {
  auto req = request(R"({"model":"alias","input":"Hi","previous_response_id":"resp_prev"})");
  const std::string s = suffix_of(req);
  auto done = responses_native_answer(R"({"id":"resp_up","object":"response","model":"gpt-real","status":"incomplete",
      "store":false,"previous_response_id":null,"output":[
        {"type":"reasoning","id":"rs_up1","summary":[]},
        {"type":"message","id":"msg_up2","role":"assistant","content":[{"type":"output_text","text":"Hello"}]},
        {"type":"web_search_call","id":"ws_up3","status":"completed"}],
      "usage":{"input_tokens":12,"output_tokens":5,"total_tokens":17}})",
                                      req);
  ASSERT_TRUE(done);
  auto r = json::parse(done->body).as_object();
  EXPECT_EQ(r["id"], req.extra.at("id"));
  EXPECT_EQ(r["model"], "alias");
  EXPECT_EQ(r["store"], true);
  EXPECT_EQ(r["previous_response_id"], "resp_prev");
  const auto& out = r["output"].as_array();
  EXPECT_EQ(out[0].at("id").as_string(), "rs_" + s + "_0");
  EXPECT_EQ(out[1].at("id").as_string(), "msg_" + s + "_1");
  EXPECT_EQ(out[2].at("id").as_string(), "ws_" + s + "_2");
  EXPECT_EQ(response_of_item(out[2].at("id").as_string()), std::string(req.extra.at("id").as_string()));
  EXPECT_EQ(done->usage.prompt_tokens, 12);
  EXPECT_EQ(done->usage.completion_tokens, 5);
  EXPECT_EQ(done->finish_reason, "length");
  // Anything but a Response object is not an answer.
  EXPECT_FALSE(responses_native_answer(R"({"object":"chat.completion","choices":[]})", req));
  EXPECT_FALSE(responses_native_answer("not json", req));
}

TEST(ResponsesNative, AStreamIsRelayedWithTheGatewaysIdsCountedAndKept) {
  auto req = request(R"({"model":"alias","input":"Hi","stream":true})");
  const std::string s = suffix_of(req);
  auto tr = responses_native_stream(req);
  const std::string upstream =
      sse("response.created", R"({"type":"response.created","sequence_number":0,"response":{"id":"resp_up","object":"response","status":"in_progress","model":"m","output":[]}})") +
      sse("response.output_item.added", R"({"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"msg_up","status":"in_progress","role":"assistant","content":[]}})") +
      sse("response.output_text.delta", R"({"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_up","output_index":0,"content_index":0,"delta":"Hel"})") +
      sse("response.output_text.delta", R"({"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_up","output_index":0,"content_index":0,"delta":"lo"})") +
      sse("response.output_item.done", R"({"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"type":"message","id":"msg_up","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello"}]}})") +
      sse("response.completed", R"({"type":"response.completed","sequence_number":5,"response":{"id":"resp_up","object":"response","status":"completed","model":"m","output":[{"type":"message","id":"msg_up","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello"}]}],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}})");
  std::string out;
  // In pieces that split events anywhere.
  for (std::size_t i = 0; i < upstream.size(); i += 7) ASSERT_TRUE(tr->feed(upstream.substr(i, 7), out));
  ASSERT_TRUE(tr->finish(out));
  auto ev = events(out);
  ASSERT_EQ(ev.size(), 6u);
  EXPECT_EQ(ev[0].at("response").at("id"), req.extra.at("id"));
  EXPECT_EQ(ev[0].at("response").at("model"), "alias");
  EXPECT_EQ(ev[1].at("item").at("id").as_string(), "msg_" + s + "_0");
  EXPECT_EQ(ev[2].at("item_id").as_string(), "msg_" + s + "_0");
  EXPECT_EQ(ev[5].at("response").at("output").at(0).at("id").as_string(), "msg_" + s + "_0");
  for (std::size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i].at("sequence_number"), static_cast<std::int64_t>(i));
  EXPECT_TRUE(tr->done());
  EXPECT_TRUE(tr->first_token_seen());
  EXPECT_EQ(tr->content_chunks(), 2);
  EXPECT_EQ(tr->usage().prompt_tokens, 3);
  EXPECT_EQ(tr->usage().completion_tokens, 2);
  auto final_answer = json::parse(tr->final_answer()).as_object();
  EXPECT_EQ(final_answer["id"], req.extra.at("id"));
  EXPECT_EQ(final_answer["store"], true);
  // Nothing more is relayed after the end.
  out.clear();
  ASSERT_TRUE(tr->feed(sse("response.output_text.delta", R"({"type":"response.output_text.delta","delta":"x"})"), out));
  EXPECT_TRUE(out.empty());
}

TEST(ResponsesNative, AStreamThatBreaksEndsInItsOwnSequence) {
  auto req = request(R"({"model":"alias","input":"Hi","stream":true})");
  const std::string head =
      sse("response.created", R"({"type":"response.created","sequence_number":0,"response":{"id":"resp_up","object":"response","status":"in_progress","model":"m","output":[]}})") +
      sse("response.output_item.done", R"({"type":"response.output_item.done","sequence_number":1,"output_index":0,"item":{"type":"reasoning","id":"rs_up","summary":[]}})");
  {
    // Cut short: finish says so, and the gateway's ending follows the upstream's numbers.
    auto tr = responses_native_stream(req);
    std::string out;
    ASSERT_TRUE(tr->feed(head, out));
    out.clear();
    EXPECT_FALSE(tr->finish(out));
    auto ev = events(tr->error_event(Reason::upstream_stream_failed, "cut"));
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].at("type"), "error");
    EXPECT_EQ(ev[0].at("sequence_number"), 2);
    EXPECT_EQ(ev[1].at("type"), "response.failed");
    EXPECT_EQ(ev[1].at("sequence_number"), 3);
    EXPECT_EQ(ev[1].at("response").at("status"), "failed");
    EXPECT_EQ(ev[1].at("response").at("id"), req.extra.at("id"));
    EXPECT_EQ(ev[1].at("response").at("output").as_array().size(), 1u);  // the items done
    EXPECT_TRUE(tr->final_answer().empty());
  }
  {
    // An event that is not JSON: the stream ends there, with the same ending.
    auto tr = responses_native_stream(req);
    std::string out;
    EXPECT_FALSE(tr->feed(head + "data: {nope\n\n", out));
    auto ev = events(out);
    ASSERT_EQ(ev.size(), 4u);
    EXPECT_EQ(ev[2].at("type"), "error");
    EXPECT_EQ(ev[3].at("type"), "response.failed");
    EXPECT_FALSE(tr->error().empty());
  }
  {
    // The upstream's own failure is relayed as it came.
    auto tr = responses_native_stream(req);
    std::string out;
    ASSERT_TRUE(tr->feed(head + sse("response.failed", R"({"type":"response.failed","sequence_number":2,"response":{"id":"resp_up","status":"failed","error":{"code":"server_error","message":"overloaded"},"output":[]}})"), out));
    EXPECT_TRUE(tr->finish(out));
    EXPECT_EQ(tr->error(), "overloaded");
    EXPECT_EQ(events(out).back().at("response").at("id"), req.extra.at("id"));
    EXPECT_EQ(tr->error_event(Reason::upstream_timeout, "late"), "");  // it has ended
  }
}

}  // namespace

namespace {

// A hostile or sloppy upstream: what it sends cannot reach the client unchecked.
TEST(ResponsesNative, AnEventTypeThatIsNotAnEventNameEndsTheStream) {
  auto req = request(R"({"model":"alias","input":"Hi","stream":true})");
  auto tr = responses_native_stream(req);
  std::string out;
  EXPECT_FALSE(tr->feed(sse("x", R"({"type":"response.created\ndata: {\"type\":\"injected\"}","sequence_number":0})"), out));
  EXPECT_EQ(out.find("injected"), std::string::npos);
  EXPECT_EQ(events(out).front().at("type"), "error");
}

TEST(ResponsesNative, AnUpstreamErrorEventEndsTheStream) {
  auto req = request(R"({"model":"alias","input":"Hi","stream":true})");
  auto tr = responses_native_stream(req);
  std::string out;
  ASSERT_TRUE(tr->feed(sse("error", R"({"type":"error","sequence_number":0,"message":"overloaded","code":"x"})") +
                           sse("response.output_text.delta", R"({"type":"response.output_text.delta","sequence_number":1,"delta":"late"})"),
                       out));
  EXPECT_EQ(events(out).size(), 1u);
  EXPECT_TRUE(tr->finish(out));
  EXPECT_EQ(tr->error(), "overloaded");
}

TEST(ResponsesNative, ItemsWithoutAUsableIndexStillGetTheGatewaysIds) {
  auto req = request(R"({"model":"alias","input":"Hi","stream":true})");
  const std::string s = suffix_of(req);
  auto tr = responses_native_stream(req);
  std::string out;
  ASSERT_TRUE(tr->feed(
      sse("response.output_item.added", R"({"type":"response.output_item.added","sequence_number":0,"item":{"type":"function_call","id":"fc_UP"}})") +
          sse("response.function_call_arguments.delta", R"({"type":"response.function_call_arguments.delta","sequence_number":1,"item_id":"fc_UP","output_index":-1,"delta":"{"})") +
          sse("response.output_text.delta", R"({"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_OTHER","output_index":-1,"delta":"x"})"),
      out));
  EXPECT_EQ(out.find("_UP"), std::string::npos) << out;
  EXPECT_EQ(out.find("OTHER"), std::string::npos) << out;
  EXPECT_EQ(out.find("18446744073709551615"), std::string::npos) << out;
  auto ev = events(out);
  EXPECT_EQ(ev[0].at("item").at("id").as_string(), "fc_" + s + "_u0");
  EXPECT_EQ(ev[1].at("item_id"), ev[0].at("item").at("id"));  // the same item, by its upstream id
}

TEST(ResponsesNative, SequenceNumbersDoNotWrapAndDoneItemsAreKeptOncePerIndex) {
  auto req = request(R"({"model":"alias","input":"Hi","stream":true})");
  auto tr = responses_native_stream(req);
  std::string out;
  const std::string done =
      R"({"type":"response.output_item.done","sequence_number":9223372036854775807,"output_index":0,"item":{"type":"message","id":"msg_u","content":[]}})";
  ASSERT_TRUE(tr->feed(sse("response.created", R"({"type":"response.created","sequence_number":0,"response":{"id":"r","output":[]}})") +
                           sse("response.output_item.done", done) + sse("response.output_item.done", done),
                       out));
  auto ev = events(tr->error_event(Reason::upstream_stream_failed, "cut"));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].at("sequence_number"), INT64_MAX);
  EXPECT_EQ(ev[1].at("response").at("output").as_array().size(), 1u);
}

TEST(ResponsesNative, AWholeAnswerThatFailedIsNoAnswerAndOneWithoutUsageIsCounted) {
  auto req = request(R"({"model":"alias","input":"Hi"})");
  EXPECT_FALSE(responses_native_answer(R"({"object":"response","status":"failed","output":[]})", req));
  EXPECT_FALSE(responses_native_answer(R"({"object":"response","status":"queued","output":[]})", req));
  auto done = responses_native_answer(
      R"({"object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"A few words of output text here."}]}]})",
      req);
  ASSERT_TRUE(done);
  EXPECT_GT(done->usage.completion_tokens, 3);
  EXPECT_EQ(done->usage.prompt_tokens, -1);  // settled from the prompt's count
}

TEST(ResponsesNative, ItemsAnUpstreamWouldLookUpGoWithoutIds) {
  auto req = request(R"({"model":"alias","input":[
      {"type":"message","id":"msg_abc_1","role":"assistant","content":[{"type":"output_text","text":"Hi"}]},
      {"type":"function_call","id":"fc_abc_2","call_id":"c1","name":"f","arguments":"{}"},
      {"type":"reasoning","id":"rs_abc_0","summary":[]},
      {"type":"reasoning","id":"rs_x","summary":[],"encrypted_content":"e"},
      {"type":"web_search_call","id":"ws_1","status":"completed"},
      {"role":"user","content":"Go on."}]})");
  config::Backend b;
  b.model = "m";
  auto input = json::parse(responses_native_call(req, b).body).at("input").as_array();
  ASSERT_EQ(input.size(), 5u);  // the reasoning without its encrypted content is left out
  EXPECT_FALSE(input[0].as_object().contains("id"));
  EXPECT_FALSE(input[1].as_object().contains("id"));
  EXPECT_EQ(input[2].at("id"), "rs_x");
  EXPECT_EQ(input[3].at("id"), "ws_1");  // its id is required
}

}  // namespace
