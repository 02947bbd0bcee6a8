#!/usr/bin/env node
// Bundles the benchmark runner (bench/main.ts and what it imports from test/ and src/)
// into bench/.build/bench.js for the machine's node. The native addons stay external
// and load from node_modules, as they do in the tests.
import * as path from "node:path";
import * as esbuild from "esbuild";

const here = path.dirname(new URL(import.meta.url).pathname);
await esbuild.build({
  entryPoints: [path.join(here, "main.ts")],
  bundle: true,
  platform: "node",
  target: "node20",
  format: "cjs",
  outfile: path.join(here, ".build/bench.js"),
  external: ["ffi-rs", "bun:ffi"],
  logLevel: "warning",
  sourcemap: "inline",
});
