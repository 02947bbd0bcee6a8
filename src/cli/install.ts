/**
 * `netkit-cni install`: puts this executable into the CNI bin dir and a conflist into the
 * CNI config dir, the way a node (or a DaemonSet's init container) is set up. Both files
 * are written under a temporary name in the target directory and renamed into place, so
 * a runtime never reads half a file and a running invocation keeps its old inode: an
 * upgrade while pods exist does not disturb them. Idempotent (identical files are left
 * alone); a conflist of the same name written for another plugin is only replaced with
 * `--force`.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { isCidr } from "../cni/address";
import { parseNetConf } from "../cni/config";
import { seaModule } from "../sys/sea-assets";

export const DEFAULT_BIN_DIR = "/opt/cni/bin";
export const DEFAULT_CONF_DIR = "/etc/cni/net.d";
export const DEFAULT_CONFLIST_NAME = "10-netkit-cni.conflist";
export const DEFAULT_NETWORK_NAME = "k8s-pod-network";
const BINARY_NAME = "netkit-cni";
const PLUGIN_TYPE = "netkit-cni";

export interface InstallOptions {
  binDir: string;
  confDir: string;
  /** A conflist file to install as is (validated); else one is generated from the flags. */
  conflist: string | undefined;
  /** File name in confDir; default: the --conflist's name, else 10-netkit-cni.conflist. */
  confName: string | undefined;
  /** The executable to install; default: the running one. */
  binary: string | undefined;
  force: boolean;
  json: boolean;
  skipBinary: boolean;
  generate: {
    podCidrs: string[];
    clusterCidrs: string[];
    datapath: string;
    name: string;
    hostInterface: string | undefined;
    mtu: number | undefined;
    portmap: boolean;
    bandwidth: boolean;
    dataDir: string | undefined;
    logFile: string | undefined;
  };
}

export type FileAction = "installed" | "unchanged" | "upgraded" | "updated" | "replaced" | "skipped";

export interface InstallReport {
  binary: { path: string; action: FileAction; sha256: string | undefined };
  conflist: { path: string; action: FileAction };
  warnings: string[];
}

export class InstallError extends Error {}

export const INSTALL_USAGE = `usage: netkit-cni install [options]
  --bin-dir DIR        CNI plugin directory (${DEFAULT_BIN_DIR})
  --conf-dir DIR       CNI config directory (${DEFAULT_CONF_DIR})
  --conflist FILE      install this conflist (validated) instead of generating one
  --conf-name NAME     file name in the config directory (${DEFAULT_CONFLIST_NAME})
  --pod-cidr CIDR      this node's pod subnet(s), comma-separated or repeated (generated conflist)
  --cluster-cidr CIDR  every pod subnet of the cluster, for the fast path (default: the pod CIDRs)
  --datapath KIND      auto | netkit | veth (auto)
  --network-name NAME  the network's name (${DEFAULT_NETWORK_NAME})
  --host-interface DEV the uplink (default: the device of the default route)
  --mtu N              pod MTU (default: the uplink's)
  --no-portmap         leave portmap (hostPort) out of the generated chain
  --bandwidth          add bandwidth (traffic shaping) to the generated chain
  --data-dir DIR       IPAM store (/var/lib/cni/networks)
  --log-file FILE      plugin log (/var/log/netkit-cni.log)
  --binary FILE        install this executable instead of the running one
  --skip-binary        write only the conflist
  --force              replace a conflist of the same name that belongs to another plugin
  --json               print what was done as JSON`;

export function parseInstallOptions(args: string[]): InstallOptions {
  const opts: InstallOptions = {
    binDir: DEFAULT_BIN_DIR,
    confDir: DEFAULT_CONF_DIR,
    conflist: undefined,
    confName: undefined,
    binary: undefined,
    force: false,
    json: false,
    skipBinary: false,
    generate: {
      podCidrs: [],
      clusterCidrs: [],
      datapath: "auto",
      name: DEFAULT_NETWORK_NAME,
      hostInterface: undefined,
      mtu: undefined,
      portmap: true,
      bandwidth: false,
      dataDir: undefined,
      logFile: undefined,
    },
  };
  const g = opts.generate;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    const value = (): string => {
      const v = args[++i];
      if (v === undefined || v === "") throw new InstallError(`${arg} needs a value`);
      return v;
    };
    const cidrs = (): string[] => {
      const list = value()
        .split(",")
        .map((c) => c.trim())
        .filter(Boolean);
      for (const c of list) if (!isCidr(c)) throw new InstallError(`${arg}: "${c}" is not a CIDR`);
      return list;
    };
    switch (arg) {
      case "--bin-dir":
        opts.binDir = value();
        break;
      case "--conf-dir":
        opts.confDir = value();
        break;
      case "--conflist":
        opts.conflist = value();
        break;
      case "--conf-name":
        opts.confName = value();
        break;
      case "--binary":
        opts.binary = value();
        break;
      case "--force":
        opts.force = true;
        break;
      case "--json":
        opts.json = true;
        break;
      case "--skip-binary":
        opts.skipBinary = true;
        break;
      case "--pod-cidr":
        g.podCidrs.push(...cidrs());
        break;
      case "--cluster-cidr":
        g.clusterCidrs.push(...cidrs());
        break;
      case "--datapath":
        g.datapath = value();
        break;
      case "--network-name":
        g.name = value();
        break;
      case "--host-interface":
        g.hostInterface = value();
        break;
      case "--mtu":
        g.mtu = Number(value());
        break;
      case "--no-portmap":
        g.portmap = false;
        break;
      case "--bandwidth":
        g.bandwidth = true;
        break;
      case "--data-dir":
        g.dataDir = value();
        break;
      case "--log-file":
        g.logFile = value();
        break;
      default:
        throw new InstallError(`unknown option ${arg}\n${INSTALL_USAGE}`);
    }
  }
  if (opts.conflist && g.podCidrs.length > 0) throw new InstallError("give either --conflist or --pod-cidr, not both");
  if (!opts.conflist && g.podCidrs.length === 0) throw new InstallError("give --pod-cidr (or --conflist FILE)");
  const name = opts.confName ?? (opts.conflist ? path.basename(opts.conflist) : DEFAULT_CONFLIST_NAME);
  if (name.includes("/") || !/\.(conflist|conf|json)$/.test(name)) {
    throw new InstallError(`config file name "${name}" must be a plain name ending in .conflist, .conf or .json`);
  }
  opts.confName = name;
  return opts;
}

/** The conflist for a node: netkit-cni with its embedded IPAM, then portmap (and bandwidth). */
export function generateConflist(g: InstallOptions["generate"]): Record<string, unknown> {
  const plugin: Record<string, unknown> = {
    type: PLUGIN_TYPE,
    datapath: g.datapath,
    clusterCIDRs: g.clusterCidrs.length > 0 ? g.clusterCidrs : g.podCidrs,
  };
  if (g.hostInterface) plugin.hostInterface = g.hostInterface;
  if (g.mtu !== undefined) plugin.mtu = g.mtu;
  if (g.logFile) plugin.logFile = g.logFile;
  const ipam: Record<string, unknown> = { type: PLUGIN_TYPE, ranges: g.podCidrs.map((subnet) => [{ subnet }]) };
  if (g.dataDir) ipam.dataDir = g.dataDir;
  plugin.ipam = ipam;
  const plugins: unknown[] = [plugin];
  if (g.portmap) plugins.push({ type: "portmap", capabilities: { portMappings: true } });
  if (g.bandwidth) plugins.push({ type: "bandwidth", capabilities: { bandwidth: true } });
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

/** Does this config file belong to netkit-cni (its first plugin is ours)? */
function isOurs(text: string): boolean {
  try {
    const conf = JSON.parse(text) as { type?: unknown; plugins?: { type?: unknown }[] };
    return (conf.plugins?.[0]?.type ?? conf.type) === PLUGIN_TYPE;
  } catch {
    return false;
  }
}

const sha256 = (data: Buffer) => createHash("sha256").update(data).digest("hex");

/** Writes `data` to `target` by a temporary file in the same directory and a rename. */
function writeAtomically(target: string, data: Buffer | string, mode: number): void {
  const tmp = path.join(path.dirname(target), `.${path.basename(target)}.tmp-${process.pid}`);
  try {
    const fd = fs.openSync(tmp, "w", mode);
    try {
      fs.writeFileSync(fd, data);
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

/** The executable to copy: --binary, or this one when running as the built executable. */
function sourceBinary(opts: InstallOptions): string {
  if (opts.binary) return opts.binary;
  if (seaModule()) return process.execPath;
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

export function install(opts: InstallOptions): InstallReport {
  const warnings: string[] = [];
  const confName = opts.confName ?? DEFAULT_CONFLIST_NAME;

  // The conflist first: a bad one fails before anything is written.
  const text = opts.conflist
    ? fs.readFileSync(opts.conflist, "utf8")
    : `${JSON.stringify(generateConflist(opts.generate), null, 2)}\n`;
  validateConflist(text, opts.conflist ?? "the generated conflist");

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
    const data = fs.readFileSync(src);
    binHash = sha256(data);
    if (!fs.existsSync(binPath)) binAction = "installed";
    else if (path.resolve(src) === path.resolve(binPath)) binAction = "unchanged";
    else {
      const st = fs.statSync(binPath);
      binAction = st.size === data.length && sha256(fs.readFileSync(binPath)) === binHash ? "unchanged" : "upgraded";
    }
    // Rename over the old file: invocations running now keep the old inode.
    if (binAction !== "unchanged") writeAtomically(binPath, data, 0o755);
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
    warnings,
  };
}

export function formatInstall(r: InstallReport): string {
  const lines = [`${r.binary.action} ${r.binary.path}`, `${r.conflist.action} ${r.conflist.path}`];
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  return lines.join("\n");
}
