/**
 * Files that travel inside the executables: the eBPF objects in both, and the ffi-rs
 * addon in the Node one only (the Bun one binds libc through bun:ffi). The two carry them
 * differently, both built by scripts/build.mjs:
 * - the Node SEA executable holds them as SEA assets (node:sea);
 * - the Bun-compiled executable's bundle defines them itself, base64 in a global the
 *   build's banner sets, because Bun has no node:sea.
 * Outside an executable (tests, development) they are read from the build tree instead.
 * Owns only the lookup; never interprets the bytes.
 */
import * as fs from "node:fs";
import * as path from "node:path";

interface SeaModule {
  isSea(): boolean;
  getAsset(key: string): ArrayBuffer;
}

/** The global the Bun build's banner defines: asset name → base64 bytes. */
const BUNDLED_ASSETS = "__netkitCniAssets";

function bundledAssets(): Record<string, string> | undefined {
  return (globalThis as Record<string, unknown>)[BUNDLED_ASSETS] as Record<string, string> | undefined;
}

let sea: SeaModule | null | undefined;

/** node:sea when running as the Node netkit-cni executable, else null. */
export function seaModule(): SeaModule | null {
  if (sea === undefined) {
    try {
      // node:sea exists from Node 20.12; required lazily so other tooling can import us.
      const mod = require("node:sea") as SeaModule;
      sea = mod.isSea() ? mod : null;
    } catch {
      sea = null;
    }
  }
  return sea;
}

/** True when this process is one of the built executables (either kind), not a script. */
export function isPackagedExecutable(): boolean {
  return bundledAssets() !== undefined || seaModule() !== null;
}

/** Where `make build` leaves the assets: dist/ of this checkout. */
const buildTree = path.resolve(__dirname, __filename.endsWith(".ts") ? "../../dist" : ".");

/** An asset's bytes: from the executable, or from `<dist>/<devPath>` when not packaged. */
export function readAsset(key: string, devPath: string): Buffer {
  const bundled = bundledAssets()?.[key];
  if (bundled !== undefined) return Buffer.from(bundled, "base64");
  const s = seaModule();
  if (s) return Buffer.from(s.getAsset(key));
  return fs.readFileSync(path.join(buildTree, devPath));
}

/** The global the Bun build's banner defines: where the agent's bundle is inside the executable. */
const BUNDLED_AGENT_FILE = "__netkitCniAgentFile";
export const AGENT_ASSET = "agent.js";

/**
 * The text of `netkit-cni agent`'s own bundle (scripts/build.mjs): a file inside the Bun
 * executable (read only when the agent runs: not part of a verb's start), an asset of
 * the Node one, or the Node build's bundle in dist/ when not packaged.
 */
export function readAgentBundle(): string {
  const file = (globalThis as Record<string, unknown>)[BUNDLED_AGENT_FILE];
  if (typeof file === "string") return fs.readFileSync(file, "utf8");
  const s = seaModule();
  if (s) return Buffer.from(s.getAsset(AGENT_ASSET)).toString("utf8");
  return fs.readFileSync(path.join(buildTree, "netkit-cni-agent-node.js"), "utf8");
}
