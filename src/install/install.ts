/**
 * `netkit-cni install`: puts this executable into the CNI bin dir and a conflist into the
 * CNI config dir, the way a node (or a DaemonSet's init container) is set up. Both files
 * are written under a temporary name in the target directory and renamed into place, so
 * a runtime never reads half a file and a running invocation keeps its old inode: an
 * upgrade while pods exist does not disturb them. Idempotent (identical files are left
 * alone); a conflist of the same name written for another plugin is only replaced with
 * `--force`.
 *
 * Not the CLI's alone: `netkit-cni agent` writes its node's conflist with it too, so it
 * lives below both (src/install/), and the agent imports nothing of src/cli.
 */

import * as fs from "node:fs";
import * as path from "node:path";
import { BANDWIDTH_CAPABILITY } from "../cni/bandwidth";
import { POD_ANNOTATIONS_CAPABILITY, parseNetConf } from "../cni/config";
import { isPackagedExecutable } from "../sys/embedded-assets";
import { sha256FileHex } from "../sys/sha256";
import { type ExistingNetwork, findReplaceable, type OurNetwork, SWAP_CONFLIST_NAME, takeoverAdvice } from "./existing";
import { DEFAULT_CONFLIST_NAME, InstallError, type InstallOptions } from "./options";

const BINARY_NAME = "netkit-cni";
const PLUGIN_TYPE = "netkit-cni";

export type FileAction = "installed" | "unchanged" | "upgraded" | "updated" | "replaced" | "skipped";

export interface InstallReport {
  binary: { path: string; action: FileAction; sha256: string | undefined };
  conflist: { path: string; action: FileAction };
  /** Bridge/ptp networks found in the config directory, which netkit-cni takes over. */
  found: ExistingNetwork[];
  notes: string[];
  warnings: string[];
}
/**
 * The conflist for a node: netkit-cni with its embedded IPAM, then portmap. No reference
 * `bandwidth` plugin: netkit-cni enforces the capability itself, and the reference one
 * refuses netkit pods (it looks for a veth peer) and shapes on the host device, which the
 * fast path's redirects skip.
 */
export function generateConflist(g: InstallOptions["generate"]): Record<string, unknown> {
  const plugin: Record<string, unknown> = {
    type: PLUGIN_TYPE,
    // The runtime passes the pod's annotations (netkit-cni.io/datapath picks a pod's device
    // kind) and its kubernetes.io/{ingress,egress}-bandwidth as the bandwidth capability.
    capabilities: { [POD_ANNOTATIONS_CAPABILITY]: true, [BANDWIDTH_CAPABILITY]: true },
    datapath: g.datapath,
    clusterCIDRs: g.clusterCidrs.length > 0 ? g.clusterCidrs : g.podCidrs,
  };
  if (g.teardown !== "inline") plugin.teardown = g.teardown;
  if (g.podHook !== "tcx") plugin.podHook = g.podHook;
  if (g.hostInterface) plugin.hostInterface = g.hostInterface;
  if (g.mtu !== undefined) plugin.mtu = g.mtu;
  if (g.logFile) plugin.logFile = g.logFile;
  if (g.bpffsRoot) plugin.bpffsRoot = g.bpffsRoot;
  if (g.agentStateDir) plugin.agentStateDir = g.agentStateDir;
  if (g.serviceTranslation) plugin.serviceTranslation = true;
  if (g.networkPolicy) plugin.networkPolicy = true;
  if (g.encryption) plugin.encryption = g.encryption;
  const ipam: Record<string, unknown> = { type: PLUGIN_TYPE, ranges: g.podCidrs.map((subnet) => [{ subnet }]) };
  if (g.dataDir) ipam.dataDir = g.dataDir;
  plugin.ipam = ipam;
  const plugins: unknown[] = [plugin];
  if (g.portmap) plugins.push({ type: "portmap", capabilities: { portMappings: true } });
  // Runtimes on libcni < 1.2 read cniVersion (up to 1.0.0); newer ones pick from cniVersions.
  return { cniVersion: "1.0.0", cniVersions: ["1.0.0", "1.1.0"], name: g.name, plugins };
}

/**
 * Checks a conflist the way the runtime will use it: JSON with a name and plugins, the
 * first plugin ours, and our plugin's config accepted by the same parser ADD uses.
 */
export function validateConflist(text: string, origin: string): Record<string, unknown> {
  let conf: Record<string, unknown>;
  try {
    conf = JSON.parse(text) as Record<string, unknown>;
  } catch (e) {
    throw new InstallError(`${origin} is not valid JSON: ${(e as Error).message}`);
  }
  const plugins = conf.plugins;
  if (typeof conf.name !== "string" || !Array.isArray(plugins) || plugins.length === 0) {
    throw new InstallError(`${origin} is not a conflist (needs "name" and a non-empty "plugins")`);
  }
  const ours = plugins[0] as Record<string, unknown>;
  if (ours?.type !== PLUGIN_TYPE)
    throw new InstallError(`${origin}: the first plugin must be of type "${PLUGIN_TYPE}"`);
  try {
    parseNetConf(
      JSON.stringify({ ...ours, cniVersion: conf.cniVersion, cniVersions: conf.cniVersions, name: conf.name }),
    );
  } catch (e) {
    throw new InstallError(`${origin}: ${(e as Error).message}`);
  }
  return conf;
}

/** Does the conflist hand the bandwidth capability to the reference plugin too? */
function chainsReferenceBandwidth(conf: Record<string, unknown>): boolean {
  const plugins = conf.plugins as Record<string, unknown>[];
  return plugins.slice(1).some((p) => p?.type === "bandwidth");
}

/** Does this config file belong to netkit-cni (its first plugin is ours)? */
function isOurs(text: string): boolean {
  try {
    const conf = JSON.parse(text) as { type?: unknown; plugins?: { type?: unknown }[] };
    return (conf.plugins?.[0]?.type ?? conf.type) === PLUGIN_TYPE;
  } catch {
    return false;
  }
}

/** Attempts at a temporary name before giving up: each is 64 random bits, so a clash means someone planted it. */
const TEMP_NAME_ATTEMPTS = 8;

/**
 * Writes `data` to `target` by a temporary file in the same directory and a rename. The
 * temporary name is random and made with O_EXCL and O_NOFOLLOW, only by us: a directory
 * others can write to (or someone who guessed a name) cannot point the write elsewhere
 * through a symlink or a file planted there. It is 0600 until complete, then `mode`.
 */
function writeAtomically(target: string, data: string | { copyOf: string }, mode: number): void {
  const { fd, tmp } = createTempFile(path.dirname(target), `.${path.basename(target)}.tmp-`);
  try {
    try {
      if (typeof data === "string") fs.writeFileSync(fd, data);
      else copyInto(fd, data.copyOf);
      fs.fchmodSync(fd, mode);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, target);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
}

/** Copies the file at `src` into the open `fd`, a chunk at a time (an executable is large). */
function copyInto(fd: number, src: string): void {
  const buf = Buffer.alloc(1 << 20);
  const from = fs.openSync(src, "r");
  try {
    for (let n = fs.readSync(from, buf); n > 0; n = fs.readSync(from, buf)) {
      for (let off = 0; off < n; ) off += fs.writeSync(fd, buf, off, n - off);
    }
  } finally {
    fs.closeSync(from);
  }
}

// The global Web Crypto: node:crypto would cost Bun's start its stream machinery (sys/sha256.ts).
const randomHex = (bytes: number) => Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("hex");

/** A new file of ours, `<dir>/<prefix><random>`, open for writing. */
function createTempFile(dir: string, prefix: string): { fd: number; tmp: string } {
  const { O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW } = fs.constants;
  for (let attempt = 1; ; attempt++) {
    const tmp = path.join(dir, `${prefix}${randomHex(8)}`);
    try {
      return { fd: fs.openSync(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600), tmp };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST" || attempt === TEMP_NAME_ATTEMPTS) throw e;
    }
  }
}

/** The executable to copy: --binary, or this one when running as the built executable. */
function sourceBinary(opts: InstallOptions): string {
  if (opts.binary) return opts.binary;
  if (isPackagedExecutable()) return process.execPath;
  throw new InstallError("not running as the netkit-cni executable: run dist/netkit-cni install, or pass --binary");
}

/**
 * Files in the config directory a runtime would pick before ours: libcni sorts the
 * names and the first usable network wins (kubelet and ctr use only that one).
 */
function shadowingConfigs(confDir: string, ours: string): string[] {
  return fs
    .readdirSync(confDir)
    .filter((f) => /\.(conflist|conf|json)$/.test(f) && !f.startsWith(".") && f !== ours && f < ours)
    .sort();
}

/**
 * Ours sorts first when a bridge/ptp config would otherwise: new pods must get netkit-cni.
 * Once written under the swap name, it stays there (re-runs must update the file in use).
 */
function defaultConfName(confDir: string, found: ExistingNetwork[]): string {
  const swap = path.join(confDir, SWAP_CONFLIST_NAME);
  if (fs.existsSync(swap) && isOurs(fs.readFileSync(swap, "utf8"))) return SWAP_CONFLIST_NAME;
  return found.some((e) => e.file < DEFAULT_CONFLIST_NAME) ? SWAP_CONFLIST_NAME : DEFAULT_CONFLIST_NAME;
}

/** The name, store and subnets of the network a (validated) conflist configures. */
function ourNetwork(conf: Record<string, unknown>): OurNetwork {
  const plugin = (conf.plugins as Record<string, unknown>[])[0] ?? {};
  const ipam = (plugin.ipam ?? {}) as { dataDir?: unknown; ranges?: unknown };
  const ranges = Array.isArray(ipam.ranges) ? (ipam.ranges.flat() as { subnet?: unknown }[]) : [];
  return {
    name: conf.name as string,
    dataDir: typeof ipam.dataDir === "string" ? ipam.dataDir : undefined,
    podCidrs: ranges.map((r) => r?.subnet).filter((s): s is string => typeof s === "string"),
  };
}

export function install(opts: InstallOptions): InstallReport {
  const warnings: string[] = [];
  const notes: string[] = [];
  const found = findReplaceable(opts.confDir);
  const confName = opts.confName ?? defaultConfName(opts.confDir, found);

  // The conflist first: a bad one fails before anything is written.
  const text = opts.conflist
    ? fs.readFileSync(opts.conflist, "utf8")
    : `${JSON.stringify(generateConflist(opts.generate), null, 2)}\n`;
  const conf = validateConflist(text, opts.conflist ?? "the generated conflist");
  if (!opts.conflist && opts.generate.bandwidth) {
    warnings.push("--bandwidth is no longer needed: netkit-cni enforces the bandwidth capability itself");
  }
  if (chainsReferenceBandwidth(conf)) {
    warnings.push(
      `${opts.conflist} chains the reference bandwidth plugin after netkit-cni, which enforces the bandwidth ` +
        "capability itself: netkit pods with bandwidth annotations would be refused (it needs a veth peer)",
    );
  }
  for (const theirs of found) {
    const advice = takeoverAdvice(theirs, ourNetwork(conf));
    notes.push(...advice.notes);
    warnings.push(...advice.warnings);
  }
  const before = found.filter((e) => e.file < confName).map((e) => e.file);
  if (found.length > 0 && before.length === 0) {
    notes.push(
      `${confName} sorts before ${found.map((e) => e.file).join(", ")}: new pods get netkit-cni; ` +
        "existing pods keep working until they are deleted, and their DEL comes to netkit-cni",
    );
  }

  fs.mkdirSync(opts.binDir, { recursive: true, mode: 0o755 });
  fs.mkdirSync(opts.confDir, { recursive: true, mode: 0o755 });

  const confPath = path.join(opts.confDir, confName);
  let confAction: FileAction = "installed";
  if (fs.existsSync(confPath)) {
    const existing = fs.readFileSync(confPath, "utf8");
    if (existing === text) confAction = "unchanged";
    else if (isOurs(existing)) confAction = "updated";
    else if (opts.force) confAction = "replaced";
    else {
      throw new InstallError(`${confPath} belongs to another plugin; not replaced (use --force to replace it)`);
    }
  }

  const binPath = path.join(opts.binDir, BINARY_NAME);
  let binAction: FileAction = "skipped";
  let binHash: string | undefined;
  if (!opts.skipBinary) {
    const src = sourceBinary(opts);
    binHash = sha256FileHex(src);
    if (!fs.existsSync(binPath)) binAction = "installed";
    else if (path.resolve(src) === path.resolve(binPath)) binAction = "unchanged";
    else {
      const same = fs.statSync(binPath).size === fs.statSync(src).size && sha256FileHex(binPath) === binHash;
      binAction = same ? "unchanged" : "upgraded";
    }
    // Rename over the old file: invocations running now keep the old inode.
    if (binAction !== "unchanged") writeAtomically(binPath, { copyOf: src }, 0o755);
  }

  if (confAction !== "unchanged") writeAtomically(confPath, text, 0o644);
  const shadows = shadowingConfigs(opts.confDir, confName);
  if (shadows.length > 0) {
    warnings.push(
      `${shadows.join(", ")} in ${opts.confDir} sort before ${confName}: runtimes will use that network, not ours`,
    );
  }
  return {
    binary: { path: binPath, action: binAction, sha256: binHash },
    conflist: { path: confPath, action: confAction },
    found,
    notes,
    warnings,
  };
}

export function formatInstall(r: InstallReport): string {
  const lines = [...r.notes, `${r.binary.action} ${r.binary.path}`, `${r.conflist.action} ${r.conflist.path}`];
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  return lines.join("\n");
}
