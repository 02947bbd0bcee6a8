#!/usr/bin/env node
// Builds the single `netkit-cni` executable: esbuild bundles src/ into one CommonJS file,
// Node's SEA embeds it (plus a V8 code cache) and the native addon (ffi-rs) into a copy
// of the node binary. The addon cannot be bundled as JavaScript; the bundle's reference to
// it is rewritten to load the SEA asset instead (see src/sys/native-addons.ts).
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as path from "node:path";
import * as esbuild from "esbuild";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
// NKC_DIST: build somewhere else (the tests' older build; see the Makefile).
const dist = path.resolve(process.env.NKC_DIST ?? path.join(root, "dist"));
const require = createRequire(import.meta.url);

const addons = {
  "ffi-rs": require.resolve("@yuuang/ffi-rs-linux-x64-gnu/ffi-rs.linux-x64-gnu.node"),
};

const nativeAddonsPlugin = {
  name: "native-addons",
  setup(build) {
    const loader = path.join(root, "src/sys/native-addons.ts");
    // ffi-rs requires its platform package.
    build.onResolve({ filter: /^@yuuang\/ffi-rs-linux-x64-gnu$/ }, () => ({ path: "ffi-rs", namespace: "addon" }));
    // ffi-rs asks process.report whether libc is musl (~5 ms per start); we ship the glibc
    // build only, and load the addon ourselves anyway.
    build.onLoad({ filter: /ffi-rs[\\/]index\.js$/ }, (args) => {
      const source = fs.readFileSync(args.path, "utf8");
      const patched = source.replace("function isMusl() {", "function isMusl() {\n  return false;");
      if (patched === source) throw new Error("ffi-rs/index.js changed: isMusl() not found");
      return { contents: patched, loader: "js" };
    });
    build.onLoad({ filter: /.*/, namespace: "addon" }, () => ({
      resolveDir: root,
      loader: "js",
      contents: `const { requireAddon } = require(${JSON.stringify(loader)}); module.exports = requireAddon("ffi-rs");`,
    }));
  },
};

fs.mkdirSync(dist, { recursive: true });
// The eBPF objects first: they travel inside the executable as SEA assets.
execFileSync(path.join(root, "scripts/build-bpf.sh"), [path.join(dist, "bpf")], { stdio: "inherit" });
const bundle = path.join(dist, "netkit-cni.js");
await esbuild.build({
  entryPoints: [path.join(root, "src/main.ts")],
  bundle: true,
  platform: "node",
  target: "node20",
  format: "cjs",
  outfile: bundle,
  plugins: [nativeAddonsPlugin],
  logLevel: "warning",
  legalComments: "none",
});

const seaConfig = path.join(dist, "sea-config.json");
const blob = path.join(dist, "sea-prep.blob");
fs.writeFileSync(
  seaConfig,
  JSON.stringify({
    main: bundle,
    output: blob,
    disableExperimentalSEAWarning: true,
    useCodeCache: true,
    assets: {
      "ffi-rs.node": addons["ffi-rs"],
      ...Object.fromEntries(
        ["bpf_lxc.o", "bpf_host.o", "bpf_lxc_ct.o", "bpf_host_ct.o", "epoch"].map((f) => [
          f,
          path.join(dist, "bpf", f),
        ]),
      ),
    },
  }),
);
execFileSync(process.execPath, ["--experimental-sea-config", seaConfig], { stdio: ["ignore", "ignore", "inherit"] });

const exe = path.join(dist, "netkit-cni");
const tmp = `${exe}.tmp`;
fs.copyFileSync(process.execPath, tmp);
fs.chmodSync(tmp, 0o755);
execFileSync(
  process.execPath,
  [
    require.resolve("postject/dist/cli.js"),
    tmp,
    "NODE_SEA_BLOB",
    blob,
    "--sentinel-fuse",
    "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2",
  ],
  { stdio: ["ignore", "ignore", "inherit"] },
);
fs.renameSync(tmp, exe);
console.log(`built ${path.relative(root, exe)} (${(fs.statSync(exe).size / 1e6).toFixed(1)} MB)`);
