/**
 * What `netkit-cni install` is asked to do: its flags (parsed with node:util.parseArgs,
 * see args.ts), their defaults and its usage text. install.ts does the work.
 */
import * as path from "node:path";
import { isCidr } from "../cni/address";
import { readFlags } from "./args";

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
   * 00-netkit-cni.conflist when a bridge/ptp config would sort before that (install-existing.ts).
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
  };
}
export class InstallError extends Error {}
export const INSTALL_USAGE = `usage: netkit-cni install [options]
  --bin-dir DIR        CNI plugin directory (${DEFAULT_BIN_DIR})
  --conf-dir DIR       CNI config directory (${DEFAULT_CONF_DIR})
  --conflist FILE      install this conflist (validated) instead of generating one
  --conf-name NAME     file name in the config directory (${DEFAULT_CONFLIST_NAME}; 00-netkit-cni.conflist
                       when a bridge or ptp config would sort before it)
  --pod-cidr CIDR      this node's pod subnet(s), comma-separated or repeated (generated conflist)
  --cluster-cidr CIDR  every pod subnet of the cluster, for the fast path (default: the pod CIDRs)
  --datapath KIND      auto | netkit | veth (auto)
  --network-name NAME  the network's name (${DEFAULT_NETWORK_NAME})
  --host-interface DEV the uplink (default: the device of the default route)
  --mtu N              pod MTU (default: the uplink's)
  --no-portmap         leave portmap (hostPort) out of the generated chain
  --bandwidth          accepted for older scripts: netkit-cni enforces pod bandwidth itself
  --data-dir DIR       IPAM store (/var/lib/cni/networks)
  --log-file FILE      plugin log (/var/log/netkit-cni.log)
  --bpffs-root DIR     where the node's eBPF state is pinned (/sys/fs/bpf/netkit-cni)
  --binary FILE        install this executable instead of the running one
  --skip-binary        write only the conflist
  --force              replace a conflist of the same name that belongs to another plugin
  --json               print what was done as JSON`;

const STRING = { type: "string" } as const;
const BOOLEAN = { type: "boolean" } as const;
const INSTALL_FLAGS = {
  "bin-dir": STRING,
  "conf-dir": STRING,
  conflist: STRING,
  "conf-name": STRING,
  "pod-cidr": STRING,
  "cluster-cidr": STRING,
  datapath: STRING,
  "network-name": STRING,
  "host-interface": STRING,
  mtu: STRING,
  "no-portmap": BOOLEAN,
  bandwidth: BOOLEAN,
  "data-dir": STRING,
  "log-file": STRING,
  "bpffs-root": STRING,
  binary: STRING,
  "skip-binary": BOOLEAN,
  force: BOOLEAN,
  json: BOOLEAN,
};

const INSTALL_FLAG_ERRORS = {
  unknown: (arg: string) => new InstallError(`unknown option ${arg}\n${INSTALL_USAGE}`),
  noValue: (flag: string) => new InstallError(`${flag} needs a value`),
};

/** "a, b,c" → [a, b, c], each a CIDR; `fail` makes the caller's usage error. */
export function cidrList(
  flag: string,
  value: string,
  fail: (message: string) => Error = (m) => new InstallError(m),
): string[] {
  const list = value
    .split(",")
    .map((c) => c.trim())
    .filter(Boolean);
  for (const c of list) if (!isCidr(c)) throw fail(`${flag}: "${c}" is not a CIDR`);
  return list;
}

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
      bpffsRoot: undefined,
    },
  };
  const g = opts.generate;
  for (const { name, flag, value = "" } of readFlags(args, INSTALL_FLAGS, INSTALL_FLAG_ERRORS)) {
    switch (name) {
      case "bin-dir":
        opts.binDir = value;
        break;
      case "conf-dir":
        opts.confDir = value;
        break;
      case "conflist":
        opts.conflist = value;
        break;
      case "conf-name":
        opts.confName = value;
        break;
      case "binary":
        opts.binary = value;
        break;
      case "force":
        opts.force = true;
        break;
      case "json":
        opts.json = true;
        break;
      case "skip-binary":
        opts.skipBinary = true;
        break;
      case "pod-cidr":
        g.podCidrs.push(...cidrList(flag, value));
        break;
      case "cluster-cidr":
        g.clusterCidrs.push(...cidrList(flag, value));
        break;
      case "datapath":
        g.datapath = value;
        break;
      case "network-name":
        g.name = value;
        break;
      case "host-interface":
        g.hostInterface = value;
        break;
      case "mtu":
        g.mtu = Number(value);
        break;
      case "no-portmap":
        g.portmap = false;
        break;
      case "bandwidth":
        g.bandwidth = true;
        break;
      case "data-dir":
        g.dataDir = value;
        break;
      case "log-file":
        g.logFile = value;
        break;
      case "bpffs-root":
        g.bpffsRoot = value;
        break;
    }
  }
  if (opts.conflist && g.podCidrs.length > 0) throw new InstallError("give either --conflist or --pod-cidr, not both");
  if (!opts.conflist && g.podCidrs.length === 0) throw new InstallError("give --pod-cidr (or --conflist FILE)");
  // Without either, install picks the name (it depends on what the directory holds).
  const name = opts.confName ?? (opts.conflist ? path.basename(opts.conflist) : undefined);
  if (name !== undefined && (name.includes("/") || !/\.(conflist|conf|json)$/.test(name))) {
    throw new InstallError(`config file name "${name}" must be a plain name ending in .conflist, .conf or .json`);
  }
  opts.confName = name;
  return opts;
}
