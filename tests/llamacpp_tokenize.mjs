// llama.cpp's tokenization of a text file by a GGUF's vocabulary, its ids on one line (no BOS):
// node tests/llamacpp_tokenize.mjs MODEL.gguf TEXT_FILE, with MT_NODE_LLAMA_CPP the node_modules
// holding npm's node-llama-cpp (make deps-llamacpp).
import fs from "fs";
import path from "path";
const [model, file] = process.argv.slice(2);
const modules = path.resolve(process.env.MT_NODE_LLAMA_CPP || "build-node/node_modules");
const { getLlama, LlamaLogLevel } = await import(path.join(modules, "node-llama-cpp/dist/index.js"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const m = await llama.loadModel({ modelPath: model });
console.log(m.tokenize(fs.readFileSync(file, "utf8")).join(" "));
process.exit(0);
