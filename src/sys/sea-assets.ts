/**
 * Files that travel inside the single executable as SEA assets (native addons, eBPF
 * objects). Outside the executable (tests, development) they are read from the build
 * tree instead. Owns only the lookup; never interprets the bytes.
 */
import * as fs from "node:fs";
import * as path from "node:path";

interface SeaModule {
  isSea(): boolean;
  getAsset(key: string): ArrayBuffer;
}

let sea: SeaModule | null | undefined;

/** node:sea when running as the netkit-cni executable, else null. */
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

/** Where `make build` leaves the assets: dist/ of this checkout. */
const buildTree = path.resolve(__dirname, __filename.endsWith(".ts") ? "../../dist" : ".");

/** An asset's bytes: from the executable, or from `<dist>/<devPath>` when not packaged. */
export function readAsset(key: string, devPath: string): Buffer {
  const s = seaModule();
  if (s) return Buffer.from(s.getAsset(key));
  return fs.readFileSync(path.join(buildTree, devPath));
}
