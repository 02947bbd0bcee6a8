/**
 * What `netkit-cni agent` is asked to do: where the API is, which node it runs on, where
 * metrics are served, masquerade, and the install options its conflist is written with
 * (the same flags and defaults as `netkit-cni install`, which does the writing).
 */

import { readFlags } from "../cli/args";
import { generateConflist, validateConflist } from "../cli/install";
import { cidrList, type InstallOptions, parseInstallOptions } from "../cli/install-options";
import { DEFAULT_AGENT_STATE_DIR } from "../commands/agent-state";

export const DEFAULT_METRICS_ADDRESS = ":9968";
export const DEFAULT_STATE_DIR = DEFAULT_AGENT_STATE_DIR;
/** What outlives a reboot: the node's WireGuard key. */
export const DEFAULT_DATA_DIR = "/var/lib/netkit-cni/agent";

export interface AgentOptions {
  /** A kubeconfig file; undefined: KUBECONFIG, else the pod's in-cluster credentials. */
  kubeconfig: string | undefined;
  nodeName: string;
  /** host:port for /metrics, /healthz, /readyz, /status ("" host: every address). */
  metricsAddress: string;
  masquerade: boolean;
  /** Destinations outside the cluster CIDRs that pods reach without masquerade. */
  noMasqueradeCidrs: string[];
  /** Where the agent tells the plugin it has synced, and the plugin leaves verb timings. */
  stateDir: string;
  /** How often the node's routes, masquerade and conflist are checked without an API event. */
  resyncSeconds: number;
  /** The cluster's pod networks (--cluster-cidr): the fast path's scope, masquerade's exceptions. */
  clusterCidrs: string[];
  /** The install flags as given; the pod CIDRs are added from the Node object. */
  installArgs: string[];
  /** Copy the executable into the CNI bin dir (once, at start). */
  installBinary: boolean;
  /** Translate ClusterIP Services at connect time: the conflist asks for it, and the agent
   * keeps the node's Service tables from the API's Services and EndpointSlices. */
  serviceTranslation: boolean;
  /** Enforce NetworkPolicy (on unless --network-policy=false): the conflist asks for it,
   * and the agent keeps each local pod's policy from the API's Pods, Namespaces and
   * NetworkPolicies. */
  networkPolicy: boolean;
  /** Pod traffic between nodes through a WireGuard device (controllers/wireguard.ts). */
  encryption: "none" | "wireguard";
  /** Never in clear to a node that publishes no key (true), or in clear to it (false). */
  encryptionStrict: boolean;
  /** Where the agent keeps what outlives a reboot (the WireGuard private key). */
  dataDir: string;
  /** The pods' MTU the conflist names, when the agent decides it (WireGuard's overhead). */
  podMtu?: number;
}

export class AgentUsageError extends Error {}

export const AGENT_USAGE = `usage: netkit-cni agent [options]
Runs on every node (the DaemonSet's main container, host network, privileged): writes this
node's conflist from its spec.podCIDRs, routes every other node's pod CIDRs via its
InternalIP, masquerades pod traffic leaving the cluster CIDRs, serves metrics.
  --kubeconfig FILE          API credentials (default: $KUBECONFIG, else in-cluster)
  --node-name NAME           this node (default: $NODE_NAME, else the hostname)
  --cluster-cidr CIDR        every pod subnet of the cluster (required; comma-separated or repeated)
  --no-masquerade-cidr CIDR  more destinations reached without masquerade
  --masquerade true|false    SNAT pod traffic leaving the cluster CIDRs (true)
  --metrics-address ADDR     where /metrics, /healthz, /readyz and /status are served (${DEFAULT_METRICS_ADDRESS})
  --state-dir DIR            the agent's files for the plugin (${DEFAULT_STATE_DIR})
  --resync-seconds N         check routes, masquerade and conflist this often (30)
  --skip-binary              do not copy this executable into the CNI bin dir
  --service-translation      translate ClusterIP Services at connect time for this node's pods
                             (watches Services and EndpointSlices; off by default)
  --network-policy true|false  enforce NetworkPolicy in the datapath (watches Pods, Namespaces,
                             NetworkPolicies and Services; true)
  --encryption none|wireguard  encrypt pod traffic between nodes with WireGuard (none)
  --encryption-strict true|false  never send pod traffic in clear to a node that publishes no
                             WireGuard key (true); false: talk to such nodes in clear
  --agent-data-dir DIR       what outlives a reboot: the WireGuard key (${DEFAULT_DATA_DIR})
and the conflist options of \`netkit-cni install\`: --bin-dir, --conf-dir, --conf-name,
  --datapath, --network-name, --host-interface, --mtu, --no-portmap, --data-dir, --log-file,
  --bpffs-root, --binary, --force`;

const STRING = { type: "string" } as const;
const BOOLEAN = { type: "boolean" } as const;
const AGENT_FLAGS = {
  kubeconfig: STRING,
  "node-name": STRING,
  "cluster-cidr": STRING,
  "no-masquerade-cidr": STRING,
  masquerade: STRING,
  "metrics-address": STRING,
  "state-dir": STRING,
  "resync-seconds": STRING,
  "skip-binary": BOOLEAN,
  "service-translation": BOOLEAN,
  "network-policy": STRING,
  encryption: STRING,
  "encryption-strict": STRING,
  "agent-data-dir": STRING,
  // Passed on to install:
  "bin-dir": STRING,
  "conf-dir": STRING,
  "conf-name": STRING,
  datapath: STRING,
  "network-name": STRING,
  "host-interface": STRING,
  mtu: STRING,
  "no-portmap": BOOLEAN,
  "data-dir": STRING,
  "log-file": STRING,
  "bpffs-root": STRING,
  binary: STRING,
  force: BOOLEAN,
};

const FLAG_ERRORS = {
  unknown: (arg: string) => new AgentUsageError(`unknown option ${arg}\n${AGENT_USAGE}`),
  noValue: (flag: string) => new AgentUsageError(`${flag} needs a value`),
};

const cidrs = (flag: string, value: string) => cidrList(flag, value, (m) => new AgentUsageError(m));

export function parseAgentOptions(args: string[], env: NodeJS.ProcessEnv, hostname: string): AgentOptions {
  const opts: AgentOptions = {
    kubeconfig: undefined,
    nodeName: env.NODE_NAME || hostname,
    metricsAddress: DEFAULT_METRICS_ADDRESS,
    masquerade: true,
    noMasqueradeCidrs: [],
    stateDir: DEFAULT_STATE_DIR,
    resyncSeconds: 30,
    clusterCidrs: [],
    installArgs: [],
    installBinary: true,
    serviceTranslation: false,
    networkPolicy: true,
    encryption: "none",
    encryptionStrict: true,
    dataDir: DEFAULT_DATA_DIR,
  };
  for (const { name, flag, value = "" } of readFlags(args, AGENT_FLAGS, FLAG_ERRORS)) {
    switch (name) {
      case "kubeconfig":
        opts.kubeconfig = value;
        break;
      case "node-name":
        opts.nodeName = value;
        break;
      case "cluster-cidr":
        opts.clusterCidrs.push(...cidrs(flag, value));
        break;
      case "no-masquerade-cidr":
        opts.noMasqueradeCidrs.push(...cidrs(flag, value));
        break;
      case "masquerade":
        if (value !== "true" && value !== "false") throw new AgentUsageError(`${flag} must be true or false`);
        opts.masquerade = value === "true";
        break;
      case "metrics-address":
        opts.metricsAddress = value;
        break;
      case "state-dir":
        opts.stateDir = value;
        break;
      case "resync-seconds": {
        const n = Number(value);
        if (!Number.isFinite(n) || n <= 0) throw new AgentUsageError(`${flag} must be a positive number`);
        opts.resyncSeconds = n;
        break;
      }
      case "skip-binary":
        opts.installBinary = false;
        break;
      case "service-translation":
        opts.serviceTranslation = true;
        break;
      case "network-policy":
        if (value !== "true" && value !== "false") throw new AgentUsageError(`${flag} must be true or false`);
        opts.networkPolicy = value === "true";
        break;
      case "encryption":
        if (value !== "none" && value !== "wireguard") throw new AgentUsageError(`${flag} must be none or wireguard`);
        opts.encryption = value;
        break;
      case "encryption-strict":
        if (value !== "true" && value !== "false") throw new AgentUsageError(`${flag} must be true or false`);
        opts.encryptionStrict = value === "true";
        break;
      case "agent-data-dir":
        opts.dataDir = value;
        break;
      default:
        opts.installArgs.push(value === "" ? `--${name}` : `--${name}=${value}`);
    }
  }
  if (opts.clusterCidrs.length === 0)
    throw new AgentUsageError("give --cluster-cidr (every pod subnet of the cluster)");
  if (!opts.nodeName) throw new AgentUsageError("no node name: give --node-name or set NODE_NAME");
  // A bad install flag (--datapath, --mtu, …) fails here, not at every sync: the conflist
  // it would write is checked now, as install checks it.
  const install = installOptionsFor(opts, ["192.0.2.0/24"]);
  try {
    validateConflist(JSON.stringify(generateConflist(install.generate)), "the conflist");
  } catch (e) {
    throw new AgentUsageError((e as Error).message);
  }
  return opts;
}

/** The install options for this node's pod CIDRs, its conflist naming the agent's state dir. */
export function installOptionsFor(opts: AgentOptions, podCidrs: string[]): InstallOptions {
  let install: InstallOptions;
  try {
    install = parseInstallOptions([
      ...opts.installArgs,
      `--pod-cidr=${podCidrs.join(",")}`,
      `--cluster-cidr=${opts.clusterCidrs.join(",")}`,
    ]);
  } catch (e) {
    throw new AgentUsageError((e as Error).message);
  }
  install.skipBinary = !opts.installBinary;
  install.generate.agentStateDir = opts.stateDir;
  if (opts.serviceTranslation) install.generate.serviceTranslation = true;
  if (opts.networkPolicy) install.generate.networkPolicy = true;
  if (opts.podMtu !== undefined) install.generate.mtu = opts.podMtu;
  if (opts.encryption === "wireguard") install.generate.encryption = "wireguard";
  return install;
}
