/**
 * Loads the native addon (ffi-rs, the Node runtime's FFI: src/sys/foreign.ts) both when
 * running from node_modules (tests, development) and from inside the Node executable,
 * where it travels as an embedded asset (src/sys/embedded-assets.ts). An addon can only
 * be dlopen()ed from a file, so the embedded copy is written once to a root-owned cache
 * directory, named by its content hash, and reused by every later invocation. Never loads
 * a file that another user could have written.
 */
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as path from "node:path";
import { isPackagedExecutable, readAsset } from "./embedded-assets";
import { mkdirs } from "./mkdirs";
import { sha256Hex } from "./sha256";

export type NativeAddonName = "ffi-rs";

/** Where extracted addons live; overridable for tests and read-only roots. */
const cacheDir = process.env.NETKIT_CNI_ADDON_CACHE ?? "/var/lib/netkit-cni/addons";

const loaded = new Map<NativeAddonName, unknown>();

/**
 * The embedded addons' content digests, computed by the build (scripts/build.mjs defines
 * this name) so that a start need not hash a megabyte to find its cached copy; undefined
 * when the bundle was built without them.
 */
declare const __NETKIT_CNI_ADDONS__: Partial<Record<NativeAddonName, AddonIdentity>> | undefined;

interface AddonIdentity {
  digest: string;
  size: number;
}

function identityFromBuild(name: NativeAddonName): AddonIdentity | undefined {
  return typeof __NETKIT_CNI_ADDONS__ === "undefined" ? undefined : __NETKIT_CNI_ADDONS__[name];
}

/** The digest that names an addon's cached copy: sha256 of its bytes, 16 hex digits. */
function addonDigest(bytes: Buffer): string {
  return sha256Hex([bytes], 16);
}

/** Returns the addon's exports from the assets of the running executable. */
export function requireAddon(name: NativeAddonName): unknown {
  const cached = loaded.get(name);
  if (cached !== undefined) return cached;
  if (!isPackagedExecutable()) return requireFromBuildTree(name);
  // The bytes are read (and, in the Bun executable, decoded) only when the cached copy
  // must be written: the build's digest and size name and check it without them.
  let bytes: Buffer | undefined;
  const embedded = (): Buffer => {
    bytes ??= readAsset(`${name}.node`, "");
    return bytes;
  };
  const id = identityFromBuild(name) ?? { digest: addonDigest(embedded()), size: embedded().length };
  const file = path.join(cacheDir, `${name}-${id.digest}.node`);
  if (!isTrustedCopy(file, id.size)) {
    if (addonDigest(embedded()) !== id.digest) throw new Error(`the embedded ${name} addon is not the one built`);
    writeAtomically(file, embedded());
  }
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

/**
 * A cached copy is used only if root owns it and nobody else can write it or its folder,
 * and it has the embedded copy's size. Its name carries the content digest, and only
 * this code, as root, writes into that folder.
 */
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
