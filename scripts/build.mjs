#!/usr/bin/env node
// Builds the two single executables from one entry (src/main.ts), each from its own
// esbuild bundle. dist/netkit-cni, the one `install` copies, is the Bun-compiled one: both
// pass the same suites, and it starts and runs a verb in about half the time and CPU
// (bench/README.md, "Control plane").
// - dist/netkit-cni-node: Node's SEA embeds the bundle (plus a V8 code cache), the eBPF objects
//   and the native addon (ffi-rs) into a copy of the node binary. The addon cannot be
//   bundled as JavaScript; the bundle's reference to it loads the embedded copy instead
//   (src/sys/native-addons.ts).
// - dist/netkit-cni: `bun build --compile` of a bundle that carries the eBPF objects in a
//   global its banner defines (src/sys/embedded-assets.ts), as Bun has no node:sea. It has
//   no native addon: libc is bound through bun:ffi there (src/sys/foreign.ts), so nothing
//   is written to disk or dlopen()ed at a start.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as path from "node:path";
import * as esbuild from "esbuild";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
// NKC_DIST: build somewhere else (the tests' older build; see the Makefile).
const dist = path.resolve(process.env.NKC_DIST ?? path.join(root, "dist"));
const require = createRequire(import.meta.url);

const ffiAddon = require.resolve("@yuuang/ffi-rs-linux-x64-gnu/ffi-rs.linux-x64-gnu.node");
const bunBinary = path.join(path.dirname(require.resolve("@oven/bun-linux-x64/package.json")), "bin/bun");
const BPF_ASSETS = [
  "bpf_lxc.o",
  "bpf_host.o",
  "bpf_lxc_ct.o",
  "bpf_host_ct.o",
  "bpf_sock.o",
  "bpf_svc.o",
  "bpf_svc_destroy.o",
  "epoch",
];

/** Points ffi-rs's require of its platform package at `addonSource` (a module's text). */
function nativeAddonPlugin(addonSource) {
  return {
    name: "native-addon",
    setup(build) {
      build.onResolve({ filter: /^@yuuang\/ffi-rs-linux-x64-gnu$/ }, () => ({ path: "ffi-rs", namespace: "addon" }));
      // ffi-rs asks process.report whether libc is musl (~5 ms per start); we ship the
      // glibc build only.
      build.onLoad({ filter: /ffi-rs[\\/]index\.js$/ }, (args) => {
        const source = fs.readFileSync(args.path, "utf8");
        const patched = source.replace("function isMusl() {", "function isMusl() {\n  return false;");
        if (patched === source) throw new Error("ffi-rs/index.js changed: isMusl() not found");
        return { contents: patched, loader: "js" };
      });
      build.onLoad({ filter: /.*/, namespace: "addon" }, () => ({
        resolveDir: root,
        loader: "js",
        contents: addonSource,
      }));
    },
  };
}

/**
 * For the Bun bundle: ffi-rs is not in it. foreign.ts requires it only under Node; were
 * that ever to change, the executable says so instead of failing to find an addon.
 */
function withoutFfiRsPlugin() {
  return {
    name: "without-ffi-rs",
    setup(build) {
      build.onResolve({ filter: /^ffi-rs$/ }, () => ({ path: "ffi-rs", namespace: "absent" }));
      build.onLoad({ filter: /.*/, namespace: "absent" }, () => ({
        loader: "js",
        contents: `throw new Error("ffi-rs is not part of the Bun executable; bun:ffi binds libc there (src/sys/foreign.ts)");`,
      }));
    },
  };
}

/** The addon's digest and size, so that a start finds its cached copy without hashing it. */
function addonIdentities() {
  const bytes = fs.readFileSync(ffiAddon);
  const digest = createHash("sha256").update(bytes).digest("hex").slice(0, 16);
  return { "ffi-rs": { digest, size: bytes.length } };
}

/** Bundles src/main.ts (or `extra`'s entry) into `outfile`, or into `extra.outdir` when split. */
async function bundle(outfile, plugins, extra = {}) {
  await esbuild.build({
    define: { __NETKIT_CNI_ADDONS__: JSON.stringify(addonIdentities()) },
    entryPoints: [path.join(root, "src/main.ts")],
    bundle: true,
    platform: "node",
    target: "node20",
    format: "cjs",
    ...(outfile === undefined ? {} : { outfile }),
    plugins,
    // foreign-bun.ts requires it only under Bun, which provides it.
    external: ["bun:ffi"],
    logLevel: "warning",
    legalComments: "none",
    ...extra,
  });
}

function report(exe) {
  console.log(`built ${path.relative(root, exe)} (${(fs.statSync(exe).size / 1e6).toFixed(1)} MB)`);
}

/** The addon as both executables load it: from their embedded assets. */
const ADDON_FROM_ASSETS = `const { requireAddon } = require(${JSON.stringify(path.join(root, "src/sys/native-addons.ts"))}); module.exports = requireAddon("ffi-rs");`;

/**
 * `netkit-cni agent`'s own bundle (src/agent/main.ts, CommonJS), which each executable
 * carries as a file and evaluates only for that command (src/cli/agent.ts): the Kubernetes
 * client and prom-client in the main bundle made every plugin verb start 60–80 ms slower.
 */
async function bundleAgent(outfile, plugins) {
  await bundle(outfile, plugins, { entryPoints: [path.join(root, "src/agent/main.ts")] });
}

async function buildNodeExecutable(digest) {
  const js = path.join(dist, "netkit-cni-node.js");
  await bundle(js, [nativeAddonPlugin(ADDON_FROM_ASSETS)]);
  const agentJs = path.join(dist, "netkit-cni-agent-node.js");
  await bundleAgent(agentJs, [nativeAddonPlugin(ADDON_FROM_ASSETS)]);
  const seaConfig = path.join(dist, "sea-config.json");
  const blob = path.join(dist, "sea-prep.blob");
  fs.writeFileSync(
    seaConfig,
    JSON.stringify({
      main: js,
      output: blob,
      disableExperimentalSEAWarning: true,
      useCodeCache: true,
      assets: {
        "ffi-rs.node": ffiAddon,
        "agent.js": agentJs,
        ...Object.fromEntries(BPF_ASSETS.map((f) => [f, path.join(dist, "bpf", f)])),
        [digest.name]: digest.file,
      },
    }),
  );
  execFileSync(process.execPath, ["--experimental-sea-config", seaConfig], { stdio: ["ignore", "ignore", "inherit"] });
  const exe = path.join(dist, "netkit-cni-node");
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
  report(exe);
}

async function buildBunExecutable(digest) {
  const files = {
    ...Object.fromEntries(BPF_ASSETS.map((f) => [f, path.join(dist, "bpf", f)])),
    [digest.name]: digest.file,
  };
  const assets = Object.fromEntries(
    Object.entries(files).map(([name, file]) => [name, fs.readFileSync(file).toString("base64")]),
  );
  // The bundle in pieces: the entry and what it imports statically, which every start
  // loads, and a chunk for what is imported when needed (src/main.ts: the plugin's own
  // verbs, the commands for people). A verb handed to the node's agent loads the first
  // part only: against a stand-in agent that answers at once, a handed ADD took 16.5 ms
  // where the whole bundle took 18.6 and a bare Bun executable 10.3 (medians of 150,
  // interleaved); the plugin's own verbs took as long as before (bench/README.md).
  const out = path.join(dist, "bun");
  fs.rmSync(out, { recursive: true, force: true });
  // The agent's bundle becomes a file inside the executable (Bun embeds what a module
  // imports with type "file"); the entry's first lines leave its path where
  // src/sys/embedded-assets.ts looks, and the eBPF objects beside it.
  await bundleAgent(path.join(out, "netkit-cni-agent-bun.js"), [withoutFfiRsPlugin()]);
  await bundle(undefined, [withoutFfiRsPlugin()], {
    // An ES module: a CommonJS bundle wraps each `import * as fs` in a helper that copies
    // every export of the built-in, and under Bun that copying loads node:stream and more
    // (about 10 ms of each start). Built-ins no verb needs are required where used.
    format: "esm",
    splitting: true,
    outdir: out,
    entryNames: "netkit-cni",
    chunkNames: "chunk-[hash]",
  });
  const js = path.join(out, "netkit-cni.js");
  const preamble = [
    `import __netkitCniAgent from "./netkit-cni-agent-bun.js" with { type: "file" };`,
    `globalThis.__netkitCniAgentFile = __netkitCniAgent;`,
    // A string literal costs a start nothing until read (measured: the same start with
    // and without it).
    `globalThis.__netkitCniAssets = ${JSON.stringify(assets)};`,
  ].join("\n");
  fs.writeFileSync(js, `${preamble}\n${fs.readFileSync(js, "utf8")}`);
  checkStartupImports(js);
  const exe = path.join(dist, "netkit-cni");
  execFileSync(
    bunBinary,
    [
      "build",
      "--compile",
      "--bytecode",
      // Bun keeps esbuild's split: each dynamically imported chunk is its own module in
      // the executable, with its own bytecode, evaluated when imported.
      "--splitting",
      "--format=esm",
      // A verb runs for tens of milliseconds: code the JIT compiles is not run again, and
      // compiling it cost a quarter of each verb's CPU (ADD 40 ms instead of 52, DEL 31
      // instead of 40). A hundredfold threshold leaves the JIT to the long loops only.
      "--compile-jit-policy=100",
      // A root process must not take settings or environment from files in whatever
      // directory the runtime started it in.
      "--no-compile-autoload-dotenv",
      "--no-compile-autoload-bunfig",
      "--target=bun-linux-x64",
      js,
      "--outfile",
      `${exe}.tmp`,
    ],
    {
      stdio: ["ignore", "ignore", "inherit"],
    },
  );
  fs.renameSync(`${exe}.tmp`, exe);
  report(exe);
}

/**
 * The built-ins every start of the ES-module bundle loads, whatever the verb: its
 * top-level imports. Each other built-in is to be required where it is used (node:net
 * imported by one module cost every verb 2.6 ms); one that slips in fails the build, named.
 */
const STARTUP_BUILTINS = new Set(["node:fs", "node:path", "node:os"]);

/**
 * The modules of src/ every start evaluates: reading stdin, handing the verb to the
 * node's agent, libc. The plugin's own verbs (the config's parser, netlink, bpf, IPAM)
 * load only when this process does the verb; one that slips in fails the build, named.
 */
const STARTUP_MODULES = new Set([
  "src/main.ts",
  "src/sys/stdio.ts",
  "src/sys/libc.ts",
  "src/sys/libc-functions.ts",
  "src/sys/foreign.ts",
  "src/sys/foreign-bun.ts",
  "src/sys/foreign-ffi-rs.ts",
  "src/sys/native-memory.ts",
  "src/sys/unix-stream.ts",
  "src/sys/file-identity.ts",
  "src/agent/verbs/protocol.ts",
  "src/agent/verbs/client.ts",
  "src/cni/defaults.ts",
  "src/cni/version.ts",
  "src/cni/errors.ts",
]);

function checkStartupImports(js) {
  // The entry and the chunks it imports statically, transitively: what a start evaluates.
  const loaded = new Set([js]);
  const imported = [];
  const modules = [];
  for (const file of loaded) {
    const text = fs.readFileSync(file, "utf8");
    // esbuild heads each module's code with its path.
    for (const [, module] of text.matchAll(/^\/\/ (src\/\S+\.ts)$/gm)) modules.push(module);
    for (const [, from] of text.matchAll(/^import (?:[^;]*? from )?"([^"]+)"[^;]*;$/gm)) {
      if (from.startsWith("node:")) imported.push(from);
      else if (from.startsWith("./") && from.endsWith(".js") && !from.includes("agent-bun")) {
        loaded.add(path.join(path.dirname(file), from));
      }
    }
  }
  const extra = [...new Set(imported.filter((name) => !STARTUP_BUILTINS.has(name)))];
  if (extra.length > 0) {
    throw new Error(
      `${path.relative(root, js)} imports ${extra.join(", ")} at its top level, loaded by every start: require it where used`,
    );
  }
  const unexpected = modules.filter((m) => !STARTUP_MODULES.has(m));
  if (!modules.includes("src/main.ts") || unexpected.length > 0) {
    throw new Error(
      `every start of ${path.relative(root, js)} loads ${unexpected.join(", ") || "no src/main.ts"}: import it where it is used (await import), or add it to STARTUP_MODULES`,
    );
  }
}

/** Bundles a pure module of src/ in memory and evaluates it in this process. */
async function loadSourceModule(entry) {
  const { outputFiles } = await esbuild.build({
    entryPoints: [path.join(root, entry)],
    bundle: true,
    platform: "node",
    target: "node20",
    format: "cjs",
    write: false,
    logLevel: "warning",
  });
  const module = { exports: {} };
  new Function("module", "exports", "require", outputFiles[0].text)(module, module.exports, require);
  return module.exports;
}

const readObjects = (dir) =>
  new Map(BPF_ASSETS.filter((f) => f.endsWith(".o")).map((f) => [f, fs.readFileSync(path.join(dir, f))]));

/**
 * Holds each eBPF object's structs, as its BTF (clang -g) lays them out, against user
 * space's field tables (src/bpf/structs.ts): a field moved in C and not in TypeScript,
 * or the other way round, fails the build here, named, instead of corrupting a map.
 */
async function checkStructLayouts(dir) {
  const { builtObjectMismatches } = await loadSourceModule("src/bpf/structs.ts");
  const problems = builtObjectMismatches(readObjects(dir));
  if (problems.length > 0) {
    console.error(
      `${path.relative(root, dir)}: the objects and src/bpf disagree on struct layouts:\n  ${problems.join("\n  ")}`,
    );
    process.exit(1);
  }
}

/**
 * The digest naming this build's pinned programs (src/bpf/objects.ts), computed once here
 * by the same code a verb would run: the executables carry it, and a verb that finds the
 * build's programs pinned reads none of the objects. Written beside dist/bpf, not in it,
 * where the tests read the objects and compute the digest from their bytes.
 */
async function writeObjectsDigest(dir) {
  const { nodeObjectsFrom, objectsDigest, DIGEST_FILE } = await loadSourceModule("src/bpf/objects.ts");
  const objects = nodeObjectsFrom((f) => (f.endsWith(".o") ? fs.readFileSync(path.join(dir, f)) : undefined));
  const file = path.join(dist, DIGEST_FILE);
  fs.writeFileSync(file, `${objectsDigest(objects.variants)}\n`);
  return { name: DIGEST_FILE, file };
}

fs.mkdirSync(dist, { recursive: true });
// The eBPF objects first: they travel inside both executables, and their structs must be
// laid out as user space reads them.
execFileSync(path.join(root, "scripts/build-bpf.sh"), [path.join(dist, "bpf")], { stdio: "inherit" });
await checkStructLayouts(path.join(dist, "bpf"));
const digest = await writeObjectsDigest(path.join(dist, "bpf"));
await buildNodeExecutable(digest);
await buildBunExecutable(digest);
