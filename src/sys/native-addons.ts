/**
 * Loads the native addon (ffi-rs) both when running from node_modules (tests,
 * development) and from inside either executable, where it travels as an embedded asset
 * (src/sys/embedded-assets.ts). An addon can only be dlopen()ed from a file, so the
 * embedded copy is written once to a root-owned cache directory, named by its content
 * hash, and reused by every later invocation. Never loads a file that another user could
 * have written.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as path from "node:path";
import { isPackagedExecutable, readAsset } from "./embedded-assets";
import { mkdirs } from "./mkdirs";

export type NativeAddonName = "ffi-rs";

/** Where extracted addons live; overridable for tests and read-only roots. */
const cacheDir = process.env.NETKIT_CNI_ADDON_CACHE ?? "/var/lib/netkit-cni/addons";

const loaded = new Map<NativeAddonName, unknown>();

/** Returns the addon's exports from the assets of the running executable. */
export function requireAddon(name: NativeAddonName): unknown {
  const cached = loaded.get(name);
  if (cached !== undefined) return cached;
  if (!isPackagedExecutable()) return requireFromBuildTree(name);
  const bytes = readAsset(`${name}.node`, "");
  const digest = createHash("sha256").update(bytes).digest("hex").slice(0, 16);
  const file = path.join(cacheDir, `${name}-${digest}.node`);
  if (!isTrustedCopy(file, bytes.length)) writeAtomically(file, bytes);
  const mod = { exports: {} as unknown };
  process.dlopen(mod, file);
  loaded.set(name, mod.exports);
  return mod.exports;
}

/**
 * Outside the executable (the bundle run by node, e.g. to profile it): the addons as
 * npm installed it next to the bundle.
 */
function requireFromBuildTree(name: NativeAddonName): unknown {
  const req = createRequire(__filename);
  const file = req.resolve("@yuuang/ffi-rs-linux-x64-gnu/ffi-rs.linux-x64-gnu.node");
  const mod = { exports: {} as unknown };
  process.dlopen(mod, file);
  loaded.set(name, mod.exports);
  return mod.exports;
}

/** A cached copy is used only if root owns it and nobody else can write it or its folder. */
function isTrustedCopy(file: string, size: number): boolean {
  try {
    const dir = fs.statSync(path.dirname(file));
    const st = fs.statSync(file);
    const safe = (s: fs.Stats) => s.uid === process.getuid?.() && (s.mode & 0o022) === 0;
    return safe(dir) && safe(st) && st.size === size;
  } catch {
    return false;
  }
}

function writeAtomically(file: string, bytes: Buffer): void {
  mkdirs(path.dirname(file), 0o700);
  fs.chmodSync(path.dirname(file), 0o700);
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, bytes, { mode: 0o500 });
  fs.renameSync(tmp, file);
}
