// Tokenizes a .inp corpus with the families' published tokenizers outside llama.cpp, as a second
// reference for scripts/dev/llamacpp_vocab.sh (#25): Hugging Face semantics (transformers.js, npm
// @lenml/tokenizers) on tokenizer.json for qwen2 / gemma3, OpenAI's tiktoken (npm tiktoken, its
// Rust core) for o200k. Prints one line of ids per text, as llama.cpp's .out files.
//   NODE_PATH=DIR/node_modules node vocab_hf_ids.mjs qwen2|gemma3 TOKENIZER_DIR CORPUS.inp
//   NODE_PATH=DIR/node_modules node vocab_hf_ids.mjs o200k - CORPUS.inp
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH || ".", "x.js"));
const [kind, dir, corpus] = process.argv.slice(2);
const texts = fs.readFileSync(corpus, "utf8").split("\n__ggml_vocab_test__\n");
texts.pop();  // the corpus ends with a separator

let encode;
if (kind === "o200k") {
  const { get_encoding } = require("tiktoken");
  const enc = get_encoding("o200k_base");
  encode = (t) => Array.from(enc.encode_ordinary(t));
} else {
  const { TokenizerLoader } = require("@lenml/tokenizers");
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
  // NOTE: special tokens as plain text, as llama.cpp's parse_special=false does: HF always matches
  // added tokens, so a text holding one may differ there (the caller reports, never hides, it).
  encode = (t) => tok.encode(t, { add_special_tokens: false });
}
for (const t of texts) console.log(encode(t).join(" "));
