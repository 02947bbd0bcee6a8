/**
 * What `netkit-cni install` is asked to do: its flags (parsed with node:util.parseArgs,
 * see ../args.ts), their defaults and its usage text. install.ts does the work.
 */
import * as path from "node:path";
import { type Flags, flagsFor, flagUsage, parseFlags } from "../args";
import { isCidr } from "../cni/address";
import { POD_HOOKS, TEARDOWNS } from "../cni/config";

export const DEFAULT_BIN_DIR = "/opt/cni/bin";
export const DEFAULT_CONF_DIR = "/etc/cni/net.d";
export const DEFAULT_CONFLIST_NAME = "10-netkit-cni.conflist";
export const DEFAULT_NETWORK_NAME = "k8s-pod-network";

export interface InstallOptions {
  binDir: string;
  confDir: string;
  /** A conflist file to install as is (validated); else one is generated from the flags. */
  conflist: string | undefined;
  /**
   * File name in confDir; default: the --conflist's name, else 10-netkit-cni.conflist, or
   * 00-netkit-cni.conflist when a bridge/ptp config would sort before that (existing.ts).
   */
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
    /** What DEL does with a pod's pair: "inline" deletes it, "deferred" retires it. */
    teardown: string;
    /** Where a veth pod's programs run: "tcx" links or "tc" filters (cni/config.ts). */
    podHook: string;
    name: string;
    hostInterface: string | undefined;
    mtu: number | undefined;
    portmap: boolean;
    bandwidth: boolean;
    dataDir: string | undefined;
    logFile: string | undefined;
    bpffsRoot: string | undefined;
    /** Set by `netkit-cni agent`: where its readiness and the plugin's verb timings live. */
    agentStateDir?: string;
    /** Set by `netkit-cni agent --service-translation`, which keeps the Service tables. */
    serviceTranslation?: boolean;
    /** Set by `netkit-cni agent --network-policy=true`, which keeps each pod's policy. */
    networkPolicy?: boolean;
    /** Set by `netkit-cni agent --encryption=wireguard`, which makes the WireGuard device. */
    encryption?: "wireguard";
  };
}
export class InstallError extends Error {}

const fail = (message: string) => new InstallError(message);

/** Every option a flag sets, flat: parseInstallOptions nests the conflist's under `generate`. */
type InstallFlags = Omit<InstallOptions, "generate"> &
  Required<Omit<InstallOptions["generate"], "agentStateDir" | "serviceTranslation" | "encryption">>;

const flag = flagsFor<InstallFlags>();
const cidrs = (text: string, name: string) => cidrList(name, text);

const INSTALL_FLAGS: Flags<InstallFlags> = {
  "bin-dir": flag.string("binDir", "DIR", DEFAULT_BIN_DIR, `CNI plugin directory (${DEFAULT_BIN_DIR})`),
  "conf-dir": flag.string("confDir", "DIR", DEFAULT_CONF_DIR, `CNI config directory (${DEFAULT_CONF_DIR})`),
  conflist: flag.string("conflist", "FILE", undefined, "install this conflist (validated) instead of generating one"),
  "conf-name": flag.string(
    "confName",
    "NAME",
    undefined,
    `file name in the config directory (${DEFAULT_CONFLIST_NAME}; 00-netkit-cni.conflist
when a bridge or ptp config would sort before it)`,
  ),
  "pod-cidr": flag.list(
    "podCidrs",
    "CIDR",
    "this node's pod subnet(s), comma-separated or repeated (generated conflist)",
    cidrs,
  ),
  "cluster-cidr": flag.list(
    "clusterCidrs",
    "CIDR",
    "every pod subnet of the cluster, for the fast path (default: the pod CIDRs)",
    cidrs,
  ),
  datapath: flag.string("datapath", "KIND", "auto", "auto | netkit | veth (auto)"),
  teardown: flag.string(
    "teardown",
    "HOW",
    "inline",
    "inline | deferred: DEL deletes a pod's device pair, or retires it for its\nnetns's teardown to delete (inline)",
  ),
  "pod-hook": flag.string(
    "podHook",
    "HOOK",
    "tcx",
    "tcx | tc: a veth pod's programs as tcx links, or as tc filters, which wait for\nno grace period but have no owner (tcx)",
  ),
  "network-name": flag.string("name", "NAME", DEFAULT_NETWORK_NAME, `the network's name (${DEFAULT_NETWORK_NAME})`),
  "host-interface": flag.string(
    "hostInterface",
    "DEV",
    undefined,
    "the uplink (default: the device of the default route)",
  ),
  mtu: flag.string("mtu", "N", undefined, "pod MTU (default: the uplink's)", Number),
  "no-portmap": flag.boolean("portmap", "leave portmap (hostPort) out of the generated chain", false),
  bandwidth: flag.boolean("bandwidth", "accepted for older scripts: netkit-cni enforces pod bandwidth itself"),
  "data-dir": flag.string("dataDir", "DIR", undefined, "IPAM store (/var/lib/cni/networks)"),
  "log-file": flag.string("logFile", "FILE", undefined, "plugin log (/var/log/netkit-cni.log)"),
  "bpffs-root": flag.string(
    "bpffsRoot",
    "DIR",
    undefined,
    "where the node's eBPF state is pinned (/sys/fs/bpf/netkit-cni)",
  ),
  binary: flag.string("binary", "FILE", undefined, "install this executable instead of the running one"),
  "skip-binary": flag.boolean("skipBinary", "write only the conflist"),
  force: flag.boolean("force", "replace a conflist of the same name that belongs to another plugin"),
  json: flag.boolean("json", "print what was done as JSON"),
};

export const INSTALL_USAGE = `usage: netkit-cni install [options]\n${flagUsage(INSTALL_FLAGS, 22)}`;

const INSTALL_FLAG_ERRORS = {
  unknown: (arg: string) => new InstallError(`unknown option ${arg}\n${INSTALL_USAGE}`),
  noValue: (flag: string) => new InstallError(`${flag} needs a value`),
};

/** "a, b,c" → [a, b, c], each a CIDR; `failWith` makes the caller's usage error. */
export function cidrList(flag: string, value: string, failWith: (message: string) => Error = fail): string[] {
  const list = value
    .split(",")
    .map((c) => c.trim())
    .filter(Boolean);
  for (const c of list) if (!isCidr(c)) throw failWith(`${flag}: "${c}" is not a CIDR`);
  return list;
}

export function parseInstallOptions(args: string[]): InstallOptions {
  const { binDir, confDir, conflist, confName, binary, force, json, skipBinary, ...generate } = parseFlags(
    args,
    INSTALL_FLAGS,
    INSTALL_FLAG_ERRORS,
  );
  if (conflist && generate.podCidrs.length > 0) throw fail("give either --conflist or --pod-cidr, not both");
  if (!conflist && generate.podCidrs.length === 0) throw fail("give --pod-cidr (or --conflist FILE)");
  if (!(TEARDOWNS as readonly string[]).includes(generate.teardown)) {
    throw fail(`--teardown: "${generate.teardown}" is not one of ${TEARDOWNS.join(", ")}`);
  }
  if (!(POD_HOOKS as readonly string[]).includes(generate.podHook)) {
    throw fail(`--pod-hook: "${generate.podHook}" is not one of ${POD_HOOKS.join(", ")}`);
  }
  // Without either, install picks the name (it depends on what the directory holds).
  const name = confName ?? (conflist ? path.basename(conflist) : undefined);
  if (name !== undefined && (name.includes("/") || !/\.(conflist|conf|json)$/.test(name))) {
    throw fail(`config file name "${name}" must be a plain name ending in .conflist, .conf or .json`);
  }
  return { binDir, confDir, conflist, confName: name, binary, force, json, skipBinary, generate };
}
