// Bundle the browser entry into one minified ESM file (dist/onesided.min.js) and print its size
// (minified and gzip): the figure benchmarks/RESULTS.md reports. Used by the browser e2e page too.
import { build } from "esbuild";
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const out = "dist/onesided.min.js";
await build({
  entryPoints: ["src/index.ts"], bundle: true, minify: true, format: "esm", platform: "browser",
  target: "es2020", outfile: out, logLevel: "error",
});
if (process.argv.includes("--report")) {
  const code = readFileSync(out);
  const gz = gzipSync(code, { level: 9 }).length;
  console.log(JSON.stringify({ file: out, minified_bytes: code.length, gzip_bytes: gz }));
}
