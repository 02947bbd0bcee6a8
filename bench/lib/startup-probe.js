// Preloaded into the plugin executable (NODE_OPTIONS=--require, which Node's single
// executable applications honour) by bench/lib/startup.ts, to see where one invocation's
// time goes without changing the plugin. Wraps the Node built-ins the bundle reaches
// (process.dlopen for the native addons, node:sea's getAsset, process.report, the
// IPAM plugin exec through child_process.spawnSync, hashing) and records wall-clock
// marks; with NKBENCH_PROBE_PROFILE=1 it also records a CPU profile through the
// inspector. Writes one JSON document to $NKBENCH_PROBE_OUT at exit.
"use strict";
const fs = require("node:fs");
const probeAt = performance.now();
const out = process.env.NKBENCH_PROBE_OUT;
const spans = {};
const add = (name, ms) => {
  const s = spans[name] ?? { ms: 0, calls: 0 };
  s.ms += ms;
  s.calls += 1;
  spans[name] = s;
};
const timed = (name, fn) =>
  function (...args) {
    const t0 = performance.now();
    try {
      return fn.apply(this, args);
    } finally {
      add(typeof name === "function" ? name(args) : name, performance.now() - t0);
    }
  };

const dlopen = process.dlopen;
process.dlopen = timed((args) => `dlopen ${String(args[1]).replace(/^.*\/|-[0-9a-f]+\.node$/g, "")}`, dlopen);
try {
  const sea = require("node:sea");
  sea.getAsset = timed((args) => `sea.getAsset ${args[0]}`, sea.getAsset);
} catch {
  // not a single executable
}
const cp = require("node:child_process");
cp.spawnSync = timed((args) => `exec ${String(args[0]).replace(/^.*\//, "")}`, cp.spawnSync);
const crypto = require("node:crypto");
const createHash = crypto.createHash;
crypto.createHash = function (...args) {
  const h = createHash.apply(this, args);
  h.update = timed("sha256 of assets and names", h.update);
  h.digest = timed("sha256 of assets and names", h.digest);
  return h;
};
const report = process.report;
if (report) {
  const getReport = report.getReport;
  report.getReport = timed("process.report.getReport (ffi-rs libc check)", getReport);
}
// main() begins by reading stdin (src/sys/stdio.ts: read(2) on descriptor 0).
let mainAt;
let mainHr;
const readSync = fs.readSync;
fs.readSync = function (fd, ...rest) {
  if (fd === 0 && mainAt === undefined) {
    mainAt = performance.now();
    mainHr = String(process.hrtime.bigint());
  }
  return readSync.call(this, fd, ...rest);
};

let profiler;
if (process.env.NKBENCH_PROBE_PROFILE === "1") {
  const inspector = require("node:inspector");
  profiler = new inspector.Session();
  profiler.connect();
  profiler.post("Profiler.enable");
  profiler.post("Profiler.setSamplingInterval", { interval: 100 });
  profiler.post("Profiler.start");
}

process.on("exit", (code) => {
  const exitAt = performance.now();
  const t = performance.nodeTiming;
  const doc = {
    code,
    nodeTiming: {
      v8Start: t.v8Start,
      environment: t.environment,
      bootstrapComplete: t.bootstrapComplete,
    },
    probeAt,
    mainAt,
    mainHr,
    exitAt,
    spans,
  };
  if (profiler) {
    profiler.post("Profiler.stop", (err, r) => {
      if (!err) doc.profile = r.profile;
    });
  }
  if (out) fs.writeFileSync(out, JSON.stringify(doc));
});
