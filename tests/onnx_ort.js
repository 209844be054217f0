// ONNX Runtime (the npm package onnxruntime-node, CPU) runs an ONNX file on
// a batch, for the zoo test (tests/test_onnx_zoo.c):
//   node onnx_ort.js MODEL.onnx X.f32 N C H W OUT.f32
// reads N x C x H x W float32 inputs from X.f32 and writes the first
// output (the logits) to OUT.f32 as float32. The package is found through
// NODE_PATH (scripts/bootstrap installs it; the test sets NODE_PATH).
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

async function main(argv) {
  if (argv.length !== 9) {
    process.stderr.write('usage: node onnx_ort.js MODEL.onnx X.f32 N C H W OUT.f32\n');
    return 2;
  }
  const [model, xpath, n, c, h, w, out] = argv.slice(2);
  const dims = [n, c, h, w].map(Number);
  const buf = fs.readFileSync(xpath);
  const want = dims.reduce((a, b) => a * b, 1) * 4;
  if (buf.length !== want) {
    process.stderr.write(`${xpath}: ${buf.length} bytes, expected ${want}\n`);
    return 1;
  }
  const x = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  const s = await ort.InferenceSession.create(model);
  const r = await s.run({[s.inputNames[0]]: new ort.Tensor('float32', x, dims)});
  const y = r[s.outputNames[0]];
  fs.writeFileSync(out, Buffer.from(y.data.buffer, y.data.byteOffset, y.data.byteLength));
  process.stdout.write(`onnxruntime ${ort.env.versions ? ort.env.versions.common : ''}: ` +
                       `${model} -> [${y.dims.join(', ')}]\n`);
  return 0;
}

main(process.argv).then((rc) => { process.exitCode = rc; },
                        (e) => { process.stderr.write(`onnx_ort.js: ${e.message}\n`); process.exitCode = 1; });
