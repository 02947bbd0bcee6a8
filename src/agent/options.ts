/**
 * What `netkit-cni agent` is asked to do: where the API is, which node it runs on, where
 * metrics are served, masquerade, and the install options its conflist is written with
 * (the same flags and defaults as `netkit-cni install`, which does the writing).
 */

import { type Flags, flagsFor, flagUsage, parseFlags } from "../args";
import { DEFAULT_AGENT_STATE_DIR } from "../commands/agent-state";
import { generateConflist, validateConflist } from "../install/install";
import { cidrList, type InstallOptions, parseInstallOptions } from "../install/options";

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
  /** Pod traffic between nodes through a WireGuard device (wireguard/controller.ts). */
  encryption: "none" | "wireguard";
  /** Never in clear to a node that publishes no key (true), or in clear to it (false). */
  encryptionStrict: boolean;
  /** Where the agent keeps what outlives a reboot (the WireGuard private key). */
  dataDir: string;
  /** The pods' MTU the conflist names, when the agent decides it (WireGuard's overhead). */
  podMtu?: number;
  /** Record every new flow a pod's policy judges (flows/): served on /flows. */
  flows: boolean;
  /** Do the verbs plugins hand over on the state directory's socket (verbs/). */
  serveVerbs: boolean;
  /**
   * Whose flows: "judged", the pods a policy judges (isolated, or audited); "all", every
   * local pod of a network enforcing policy (each then judged, and its flows remembered,
   * though nothing isolates it: a lookup more per packet).
   */
  flowPods: "judged" | "all";
  /** Flow records kept in memory for /flows. */
  flowBuffer: number;
  /** Also append them to this file, JSON lines (undefined: no file). */
  flowLog: string | undefined;
  flowLogMaxBytes: number;
  flowLogFiles: number;
  /** Only these fields of each record in the file (dotted for nested: source.pod); empty: all. */
  flowLogFields: string[];
  /** Aggregated records per window of this many seconds into FILE.aggregated (0: none). */
  flowAggregateSeconds: number;
}

export class AgentUsageError extends Error {}

/** The agent's own flags' fields: every option but what the agent decides itself. */
type AgentFlagOptions = Omit<AgentOptions, "podMtu">;

const flag = flagsFor<AgentFlagOptions>();
const usage = (message: string) => new AgentUsageError(message);
const cidrs = (text: string, name: string) => cidrList(name, text, usage);
const trueOrFalse = (text: string, name: string): boolean => {
  if (text !== "true" && text !== "false") throw usage(`${name} must be true or false`);
  return text === "true";
};

const positiveInteger = (text: string, name: string): number => {
  const n = Number(text);
  if (!Number.isInteger(n) || n <= 0) throw usage(`${name} must be a positive whole number`);
  return n;
};

const OWN_FLAGS: Flags<AgentFlagOptions> = {
  kubeconfig: flag.string("kubeconfig", "FILE", undefined, "API credentials (default: $KUBECONFIG, else in-cluster)"),
  "node-name": flag.string("nodeName", "NAME", "", "this node (default: $NODE_NAME, else the hostname)"),
  "cluster-cidr": flag.list(
    "clusterCidrs",
    "CIDR",
    "every pod subnet of the cluster (required; comma-separated or repeated)",
    cidrs,
  ),
  "no-masquerade-cidr": flag.list("noMasqueradeCidrs", "CIDR", "more destinations reached without masquerade", cidrs),
  masquerade: flag.string(
    "masquerade",
    "true|false",
    true,
    "SNAT pod traffic leaving the cluster CIDRs (true)",
    trueOrFalse,
  ),
  "metrics-address": flag.string(
    "metricsAddress",
    "ADDR",
    DEFAULT_METRICS_ADDRESS,
    `where /metrics, /healthz, /readyz and /status are served (${DEFAULT_METRICS_ADDRESS})`,
  ),
  "state-dir": flag.string(
    "stateDir",
    "DIR",
    DEFAULT_STATE_DIR,
    `the agent's files for the plugin (${DEFAULT_STATE_DIR})`,
  ),
  "resync-seconds": flag.string(
    "resyncSeconds",
    "N",
    30,
    "check routes, masquerade and conflist this often (30)",
    (text, name) => {
      const n = Number(text);
      if (!Number.isFinite(n) || n <= 0) throw usage(`${name} must be a positive number`);
      return n;
    },
  ),
  "skip-binary": flag.boolean("installBinary", "do not copy this executable into the CNI bin dir", false),
  "service-translation": flag.boolean(
    "serviceTranslation",
    "translate ClusterIP Services at connect time for this node's pods\n(watches Services and EndpointSlices; off by default)",
  ),
  "network-policy": flag.string(
    "networkPolicy",
    "true|false",
    true,
    "enforce NetworkPolicy in the datapath (watches Pods, Namespaces,\nNetworkPolicies and Services; true)",
    trueOrFalse,
  ),
  encryption: flag.string(
    "encryption",
    "none|wireguard",
    "none",
    "encrypt pod traffic between nodes with WireGuard (none)",
    (text, name) => {
      if (text !== "none" && text !== "wireguard") throw usage(`${name} must be none or wireguard`);
      return text;
    },
  ),
  "encryption-strict": flag.string(
    "encryptionStrict",
    "true|false",
    true,
    "never send pod traffic in clear to a node that publishes no\nWireGuard key (true); false: talk to such nodes in clear",
    trueOrFalse,
  ),
  "serve-verbs": flag.boolean(
    "serveVerbs",
    "do ADD, DEL and CHECK for the plugin on a root-only socket in the\nstate directory (the plugin does them itself when no agent answers)",
  ),
  flows: flag.boolean(
    "flows",
    "record every new flow a pod's policy judges, allowed or denied\n(`netkit-cni flows`, /flows; off by default)",
  ),
  "flow-pods": flag.string(
    "flowPods",
    "judged|all",
    "judged",
    "with --flows: whose flows: the pods a policy judges (judged), or\nevery local pod, each then judged for its records (all)",
    (text, name) => {
      if (text !== "judged" && text !== "all") throw usage(`${name} must be judged or all`);
      return text;
    },
  ),
  "flow-buffer": flag.string("flowBuffer", "N", 8192, "flow records kept in memory for /flows (8192)", positiveInteger),
  "flow-log": flag.string("flowLog", "FILE", undefined, "with --flows: append each record to FILE, JSON lines"),
  "flow-log-max-bytes": flag.string(
    "flowLogMaxBytes",
    "N",
    10 * 1024 * 1024,
    "rotate the flow log at this size (10485760)",
    positiveInteger,
  ),
  "flow-log-files": flag.string("flowLogFiles", "N", 5, "rotated flow logs kept (5; 0: none)", (text, name) => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < 0) throw usage(`${name} must be a whole number`);
    return n;
  }),
  "flow-log-fields": flag.list(
    "flowLogFields",
    "FIELD",
    "only these fields in the flow log (comma-separated; source.pod for nested)",
    (text) => text.split(",").filter((f) => f !== ""),
  ),
  "flow-aggregate-seconds": flag.string(
    "flowAggregateSeconds",
    "N",
    0,
    "with --flow-log: also aggregate per window of N seconds into FILE.aggregated (0: off)",
    (text, name) => {
      const n = Number(text);
      if (!Number.isInteger(n) || n < 0) throw usage(`${name} must be a whole number of seconds`);
      return n;
    },
  ),
  "agent-data-dir": flag.string(
    "dataDir",
    "DIR",
    DEFAULT_DATA_DIR,
    `what outlives a reboot: the WireGuard key (${DEFAULT_DATA_DIR})`,
  ),
};

/** `netkit-cni install`'s flags the agent takes and passes on, as typed, for its conflist. */
const PASSED_ON = {
  string: [
    ...["bin-dir", "conf-dir", "conf-name", "datapath", "teardown", "pod-hook", "network-name", "host-interface"],
    "mtu",
    ...["data-dir", "log-file", "bpffs-root", "binary"],
  ],
  boolean: ["no-portmap", "force"],
};
const PASSED_ON_FLAGS: Flags<AgentFlagOptions> = Object.fromEntries([
  ...PASSED_ON.string.map((name) => [name, flag.list("installArgs", "", "", (text) => [`--${name}=${text}`])]),
  ...PASSED_ON.boolean.map((name) => [name, flag.appended("installArgs", [`--${name}`])]),
]);

export const AGENT_USAGE = `usage: netkit-cni agent [options]
Runs on every node (the DaemonSet's main container, host network, privileged): writes this
node's conflist from its spec.podCIDRs, routes every other node's pod CIDRs via its
InternalIP, masquerades pod traffic leaving the cluster CIDRs, serves metrics.
${flagUsage(OWN_FLAGS, 33)}
and the conflist options of \`netkit-cni install\` (install --help; --teardown is deferred
here unless given: the agent deletes what such a DEL leaves):
${wrap(
  [...PASSED_ON.string, ...PASSED_ON.boolean].map((name) => `--${name}`),
  88,
)}`;

/** `words` joined by ", " in lines of at most `width`, each indented by two. */
function wrap(words: string[], width: number): string {
  const lines = [""];
  for (const word of words) {
    const last = lines.length - 1;
    if (lines[last] && `  ${lines[last]}, ${word},`.length > width) lines.push(word);
    else lines[last] = lines[last] ? `${lines[last]}, ${word}` : word;
  }
  return lines.map((l) => `  ${l}`).join(",\n");
}

const FLAG_ERRORS = {
  unknown: (arg: string) => usage(`unknown option ${arg}\n${AGENT_USAGE}`),
  noValue: (name: string) => usage(`${name} needs a value`),
};

export function parseAgentOptions(args: string[], env: NodeJS.ProcessEnv, hostname: string): AgentOptions {
  const opts: AgentOptions = parseFlags(args, { ...OWN_FLAGS, ...PASSED_ON_FLAGS }, FLAG_ERRORS, {
    nodeName: env.NODE_NAME || hostname,
  });
  if (opts.clusterCidrs.length === 0)
    throw new AgentUsageError("give --cluster-cidr (every pod subnet of the cluster)");
  if (!opts.nodeName) throw new AgentUsageError("no node name: give --node-name or set NODE_NAME");
  if (!opts.flows && (opts.flowLog !== undefined || opts.flowAggregateSeconds > 0 || opts.flowPods !== "judged"))
    throw new AgentUsageError("--flow-log, --flow-aggregate-seconds and --flow-pods need --flows");
  if (opts.flows && !opts.networkPolicy)
    throw new AgentUsageError("--flows records what NetworkPolicy judges: it needs --network-policy=true");
  if (opts.flowAggregateSeconds > 0 && opts.flowLog === undefined)
    throw new AgentUsageError("--flow-aggregate-seconds writes beside --flow-log: give both");
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
      // The agent deletes what a deferred DEL leaves (datapath/retired.ts): DEL need not
      // wait for the pair's deletion where it runs. A --teardown given comes later and wins.
      "--teardown=deferred",
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
