// Runs ONNX models in onnxruntime-web's WASM backend under Node.js, for
// jax2onnx_nn.verify(runtime="onnxruntime-web"). Usage: node web_runner.mjs PACKAGE_DIR, where
// PACKAGE_DIR holds node_modules/onnxruntime-web. One process serves many requests: each line
// on stdin is a JSON request {model, inputs: [{name, dtype, shape, file}], out}; tensors are raw
// little-endian files. The reply (one JSON line on stdout) lists the outputs written to `out`
// ({name, dtype, shape, file}) or {error}. Sessions are cached per model path (the last 8).
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const packageDir = path.resolve(process.argv[2] || ".");
const require = createRequire(path.join(packageDir, "package.json"));
const ort = await import(pathToFileURL(require.resolve("onnxruntime-web")).href);

ort.env.wasm.numThreads = 1;
ort.env.logLevel = "error";

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array, float16: Uint16Array,
};
const MAX_SESSIONS = 8;
const sessions = new Map();

async function session(modelPath) {
  if (!sessions.has(modelPath)) {
    if (sessions.size >= MAX_SESSIONS) {
      const [oldest, old] = sessions.entries().next().value;
      sessions.delete(oldest);
      await old.release();
    }
    const bytes = fs.readFileSync(modelPath);
    sessions.set(modelPath, await ort.InferenceSession.create(bytes, { executionProviders: ["wasm"] }));
  }
  return sessions.get(modelPath);
}

function readTensor({ dtype, shape, file }) {
  const buf = fs.readFileSync(file);
  const copy = new ArrayBuffer(buf.byteLength);
  new Uint8Array(copy).set(buf);
  return new ort.Tensor(dtype, new ARRAYS[dtype](copy), shape);
}

async function handle(request) {
  const sess = await session(request.model);
  const feeds = {};
  for (const input of request.inputs) feeds[input.name] = readTensor(input);
  const results = await sess.run(feeds);
  return {
    outputs: sess.outputNames.map((name, i) => {
      const t = results[name];
      const file = path.join(request.out, `out_${i}.bin`);
      fs.writeFileSync(file, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
      return { name, dtype: t.type, shape: t.dims, file };
    }),
  };
}

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let reply;
  try {
    reply = await handle(JSON.parse(line));
  } catch (err) {
    reply = { error: String(err && err.message ? err.message : err) };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
