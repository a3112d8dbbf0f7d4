// Writes expected.json, the reference token ids and counts the C++ tokenizer is tested
// against, from the tiktoken npm package (WASM build of OpenAI's tiktoken) pinned in
// data/tokenizer/package.json.
//
//   scripts/fetch-tokenizer.sh && node tests/unit/tokenizer/gen_expected.mjs
//
// The reference is get_encoding() (ranks built into the WASM); the script also checks that
// the encoders/*.json files the C++ code loads give the same ids.
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..");
const pkgDir = join(root, "data", "tokenizer");
const require = createRequire(join(pkgDir, "package.json"));
const tiktoken = require("tiktoken");
const { Tiktoken } = require("tiktoken/lite");
const version = JSON.parse(readFileSync(join(pkgDir, "node_modules/tiktoken/package.json"), "utf8")).version;

const encodings = ["cl100k_base", "o200k_base"];
const enc = Object.fromEntries(encodings.map((e) => [e, tiktoken.get_encoding(e)]));
const lite = Object.fromEntries(
  encodings.map((e) => {
    const j = JSON.parse(readFileSync(join(pkgDir, "node_modules/tiktoken/encoders", e + ".json"), "utf8"));
    return [e, new Tiktoken(j.bpe_ranks, j.special_tokens, j.pat_str)];
  }),
);
const ids = (e, text) => {
  const a = Array.from(enc[e].encode_ordinary(text));
  const b = Array.from(lite[e].encode_ordinary(text));
  if (a.join() !== b.join()) throw new Error(`${e}: embedded and JSON ranks differ on ${JSON.stringify(text)}`);
  return a;
};

// Deterministic pseudo-random text (xorshift32), so the fixture never changes by itself.
let seed = 0x2545f491;
const rnd = (n) => {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed % n;
};
const pick = (a) => a[rnd(a.length)];

// Short strings: ids are compared.
const letters = (alphabet, n) => Array.from({ length: n }, () => pick(alphabet)).join("");
const short = [
  "",
  " ",
  "a",
  "hello world",
  "Hello, World!",
  "The quick brown fox jumps over the lazy dog.",
  "I'LL go, you'RE here, he's there, we'Ve been, I'm done, she'd know, don'T",
  "I'll I’ll 'S 'ſ 'K", // typographic apostrophe, long s, Kelvin sign
  "can't won't shouldn't y'all o'clock rock'n'roll",
  "   leading spaces",
  "trailing spaces   ",
  "trailing spaces then newline   \n",
  "a  b   c    d     e",
  "\n",
  "\n\n\n",
  "line one\nline two\r\nline three\rline four",
  "tabs\tand\t\ttabs\t",
  "  \n  \n\t\n",
  "word\n\n\n\n   indented",
  "1",
  "12",
  "123",
  "1234",
  "12345678901234567890123456789",
  "3.14159265358979323846264338327950288419716939937510",
  "-42 +7 1e10 0x1F 1,000,000 1_000_000 $19.99 50%",
  "2024-01-15T10:30:00Z 192.168.0.1:8080",
  "٣٤٥ ١٢٣٤٥ ½ ¼ Ⅻ ²³ 一二三",
  "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}",
  "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
  "def f(x):\n    return x ** 2  # square\n",
  "#include <vector>\nint main() { return 0; }\n",
  "if (a && b || !c) return a->b->c ?: d;",
  "=== --- *** ### !!! ??? ... ,,, ;;; ::: ''' \"\"\"",
  "https://example.com/path/to/page?query=1&x=y#frag",
  "user@example.com <mailto:user@example.com>",
  "path/to/file.txt ../../etc/passwd C:\\Windows\\System32",
  "<|endoftext|> <|fim_prefix|> <|endofprompt|>",
  "你好，世界！",
  "日本語のテキストです。カタカナとひらがな。",
  "한국어 텍스트입니다",
  "Привет, мир! Как дела?",
  "Ελληνικά κείμενα",
  "مرحبا بالعالم",
  "שלום עולם",
  "नमस्ते दुनिया",
  "ภาษาไทย",
  "café naïve résumé über straße Ångström façade",
  "ÉCOLE ÇA SOUS-ÉTAT",
  "😀 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️ ✨",
  "emoji😀inside words🎉and🚀",
  "mixed English 中文 русский 日本語 123 😀 end",
  "combining: e\u0301 a\u0300 n\u0303 \u0915\u093f",
  "zero\u200bwidth\u200djoiner\ufeffbom",
  "nbsp\u00a0here\u2003em\u3000ideographic",
  "nel\u0085next\u2028line\u2029para",
  "control\u0001\u0002\u007fchars",
  "CamelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
  "HTTPServer XMLHttpRequest iPhone McDonald's O'Neill",
  "ÀÉÎõü ÄÖÜäöü ŁŃŚŹŻ łńśźż",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 𝟙𝟚𝟛",
  "a".repeat(100),
  " ".repeat(40) + "x",
  "\n".repeat(20),
  "ab".repeat(60),
  "1234567890".repeat(5),
  // Code points Unicode assigned after PCRE2 10.42's tables (14.0), in ordinary text: the
  // C++ side then runs its patched pattern (src/tokenizer/gen_unicode.mjs) over all of it.
  "Kaktovik \u{1D2C0}\u{1D2C1}\u{1D2C2} numerals, the quick brown fox's 42 dogs\n  I'LL be there",
  "CJK Ext H \u{31350}\u{31351} and I \u{2EBF0}: 你好，世界！ 😀 café  \t\n\n",
  "Mongolian vowel separator \u180E here \u180E\u180E  and  spaces   \n",
  "Garay \u{10D40}\u{10D4A}\u{10D50}\u{10D70} Todhri \u{105C0} Latin \uA7CB\uA7CD x\u0897y",
];
// Pieces longer than the C++ stack scan (96 bytes) take the heap path; ids are compared.
short.push(letters([..."abcdefghijklmnopqrstuvwxyz"], 300));
short.push(letters([..."etaoinshrdlu"], 500));
short.push(letters([..."aeiouAEIOUéèçñßøæ"], 200));
short.push(letters([..."ЖжЩщЫыЭэЮюЯяабвгд"], 150));
short.push(letters([..."!@#$%^&*()_+-=[]{}|;:,.<>/?~"], 300));

// Longer texts: counts are compared (ids of the first 64 tokens as a spot check).
const words = ["the", "gateway", "token", "stream", "request", "quota", "model", "Redis",
  "latency", "p95", "upstream", "retry", "backend", "admission", "SSE", "JSON", "HTTP/1.1",
  "can't", "it's", "O(n)", "—", "naïve", "café", "über"];
const cjk = "网关限流令牌流式请求模型上游重试后端并发队列熔断降级监控指标延迟吞吐的是了在和有我们这个一";
const sentence = () => {
  const n = 4 + rnd(14);
  const w = [];
  for (let i = 0; i < n; i++) w.push(pick(words));
  w[0] = w[0][0].toUpperCase() + w[0].slice(1);
  return w.join(" ") + pick([".", ".", ".", "!", "?", ":", ";"]);
};
const long = [];
{
  let t = "";
  for (let p = 0; p < 16; p++) {
    for (let s = 0; s < 1 + rnd(6); s++) t += sentence() + " ";
    t += pick(["\n\n", "\n", "\n\n\n", "  \n"]);
  }
  long.push({ name: "english-prose", text: t });
}
{
  let t = "";
  for (let i = 0; i < 1200; i++) t += cjk[rnd(cjk.length)] + (rnd(12) === 0 ? pick(["，", "。", "、", "：", "\n"]) : "");
  long.push({ name: "chinese", text: t });
}
{
  let t = "";
  for (let i = 0; i < 80; i++) {
    t += `${" ".repeat(4 * rnd(4))}const v${i} = compute(${rnd(100000)}, "${pick(words)}", [${rnd(10)}, ${rnd(1000)}]);  // ${sentence()}\n`;
    if (rnd(7) === 0) t += "\n" + " ".repeat(rnd(9)) + "}\n";
  }
  long.push({ name: "code", text: t });
}
{
  const objs = [];
  for (let i = 0; i < 40; i++)
    objs.push({ id: `req_${rnd(1e9).toString(16)}`, model: pick(["gpt-4o", "llama3:8b", "demo"]),
      tokens: rnd(5000), latency_ms: rnd(100000) / 100, ok: rnd(2) === 0, note: sentence() });
  long.push({ name: "json", text: JSON.stringify(objs, null, rnd(2) ? 2 : undefined) });
}
{
  let t = "";
  for (let i = 0; i < 500; i++) t += String(rnd(1e9)) + pick([" ", ",", ".", "\n", "", "-"]);
  long.push({ name: "numbers", text: t });
}
{
  let t = "";
  const pieces = ["😀", "🎉", "👍🏽", "🇯🇵", "Привет", "мир", "日本", "語", "café", "ñ", " ", "  ", "\n",
    "\t", "x", "Ωμέγα", "١٢٣", "…", "—", "\u00a0", "𝔘", "I'LL", "WE'D", "'s"];
  for (let i = 0; i < 1200; i++) t += pick(pieces);
  long.push({ name: "mixed-scripts", text: t });
}
{
  let t = "";
  for (let i = 0; i < 80; i++) t += " ".repeat(rnd(30)) + pick(words) + "\t".repeat(rnd(3)) + (rnd(3) ? "\n" : "\r\n") + (rnd(4) ? "" : "   \n\n");
  long.push({ name: "whitespace", text: t });
}
// Long runs are stored as [segment, times] pairs and rebuilt by the test.
const runs = [
  { name: "long-letter-run", parts: [["a", 5000], [" ", 1], ["ab", 3000]] },
  { name: "long-symbol-run", parts: [["=-", 2000], [".", 1], ["!?", 1000]] },
  { name: "long-space-run", parts: [[" ", 10000], ["x", 1], [" ", 10000], ["\n", 1], ["\t \n", 300]] },
  { name: "long-cjk-run", parts: [["的", 3000], [cjk, 50]] },
  { name: "long-digit-run", parts: [["9", 10000], ["0", 1]] },
];
const expand = (parts) => parts.map(([seg, n]) => seg.repeat(n)).join("");

// Chat prompts counted by the cookbook formula with tiktoken's counts.
const chats = [
  [ // the OpenAI cookbook's example ("How to count tokens with tiktoken")
    { role: "system", content: "You are a helpful, pattern-following assistant that translates corporate jargon into plain English." },
    { role: "system", name: "example_user", content: "New synergies will help drive top-line growth." },
    { role: "system", name: "example_assistant", content: "Things working well together will increase revenue." },
    { role: "system", name: "example_user", content: "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage." },
    { role: "system", name: "example_assistant", content: "Let's talk later when we're less busy about how to do better." },
    { role: "user", content: "This late pivot means we don't have time to boil the ocean for the client deliverable." },
  ],
  [{ role: "user", content: "hi" }],
  [{ role: "user", content: "" }],
  [
    { role: "system", content: "Answer in Chinese." },
    { role: "user", content: "什么是令牌桶限流？请简要说明。" },
    { role: "assistant", content: "令牌桶按固定速率补充令牌，请求消耗令牌。" },
    { role: "user", name: "alice", content: "And in English, with an example in code?\n```\nbucket.take(1)\n```" },
  ],
];
const tokensPerMessage = 3, tokensPerName = 1, replyPriming = 3;
const chatCount = (e, msgs) => {
  let n = replyPriming;
  for (const m of msgs) {
    n += tokensPerMessage;
    for (const [k, v] of Object.entries(m)) {
      n += ids(e, v).length;
      if (k === "name") n += tokensPerName;
    }
  }
  return n;
};

// Unicode sweep: every scalar value in several contexts (letters, digits, spaces, "'s", an
// apostrophe before it), per block of 4096 code points; the
// fixture keeps a count and an FNV-1a hash of the ids per block. The same construction is
// in tokenizer_test.cpp (unicode_block_text).
const blockText = (block) => {
  let t = "";
  for (let cp = block * 4096; cp < (block + 1) * 4096; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    t += c + "x" + c + c + "1 " + c + "'" + c + " A" + c + "\n" + c + "'s 1" + c + "23\n";
  }
  return t;
};
const fnv = (arr) => {
  let h = 0x811c9dc5;
  for (const v of arr) {
    for (let i = 0; i < 4; i++) {
      h ^= (v >>> (8 * i)) & 0xff;
      h = Math.imul(h, 0x01000193) >>> 0;
    }
  }
  return h;
};

const out = { generator: "tests/unit/tokenizer/gen_expected.mjs", reference: `tiktoken@${version} encode_ordinary`, short: [], long: [], chat: [], unicode_blocks: {} };
for (const text of short) {
  const c = { text };
  for (const e of encodings) c[e] = ids(e, text);
  out.short.push(c);
}
for (const { name, text, parts } of [...long, ...runs]) {
  const c = parts ? { name, parts } : { name, text };
  const t = parts ? expand(parts) : text;
  for (const e of encodings) {
    const a = ids(e, t);
    c[e] = { count: a.length, first: a.slice(0, 64) };
  }
  out.long.push(c);
}
for (const messages of chats) {
  const c = { messages };
  for (const e of encodings) c[e] = chatCount(e, messages);
  out.chat.push(c);
}
for (const e of encodings) {
  const blocks = [];
  for (let b = 0; b < 0x110000 / 4096; b++) {
    const a = Array.from(enc[e].encode_ordinary(blockText(b)));
    blocks.push([a.length, fnv(a)]);
  }
  out.unicode_blocks[e] = blocks;
}

// One case per line keeps diffs readable.
const lines = ["{"];
lines.push(`"generator": ${JSON.stringify(out.generator)},`);
lines.push(`"reference": ${JSON.stringify(out.reference)},`);
for (const key of ["short", "long", "chat"]) {
  lines.push(`"${key}": [`);
  out[key].forEach((c, i) => lines.push(JSON.stringify(c) + (i + 1 < out[key].length ? "," : "")));
  lines.push("],");
}
lines.push(`"unicode_blocks": {`);
encodings.forEach((e, i) => lines.push(`${JSON.stringify(e)}: ${JSON.stringify(out.unicode_blocks[e])}` + (i + 1 < encodings.length ? "," : "")));
lines.push("}", "}");
writeFileSync(join(here, "expected.json"), lines.join("\n") + "\n");
console.log(`wrote ${join(here, "expected.json")}: ${out.short.length} short, ${out.long.length} long, ${out.chat.length} chat, ${0x110000 / 4096} unicode blocks x ${encodings.length}`);
