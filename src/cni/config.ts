/**
 * The network configuration from stdin, parsed into a typed `NetConf`. Rejects what the
 * plugin cannot act on with the spec's codes (6 for undecodable input, 7 for invalid
 * configuration) and a message naming the field. Unknown fields are ignored, as the spec
 * asks, so configs written for newer versions still load.
 */

import { isCidr } from "./address";
import { type BandwidthRequest, readBandwidthRequest } from "./bandwidth";
import { DEFAULT_BPFFS_ROOT, DEFAULT_LOG_FILE } from "./defaults";
import { CniError, ErrorCode, invalidConfig } from "./errors";
import { parseResult, type Result } from "./result";
import { type CniVersion, negotiateVersion } from "./version";

/** What a network (or a pod's annotation) asks for; "auto": netkit where the kernel has it,
 * else veth. The device a pod gets is a DeviceKind (datapath/types.ts). */
export const DATAPATHS = ["auto", "netkit", "veth"] as const;
export type DatapathChoice = (typeof DATAPATHS)[number];

/**
 * A pod may ask for its own device kind over the network's `datapath` (an A/B of one
 * node, or a runtime such as Kata that cannot take a netkit peer), with this annotation.
 * CRI runtimes pass the pod's annotations to plugins that declare the capability below
 * (containerd 1.6+, CRI-O), as runtimeConfig["io.kubernetes.cri.pod-annotations"].
 */
export const DATAPATH_ANNOTATION = "netkit-cni.io/datapath";
export const POD_ANNOTATIONS_CAPABILITY = "io.kubernetes.cri.pod-annotations";
export const POD_DATAPATHS = ["veth", "netkit"] as const;
export type PodDatapath = (typeof POD_DATAPATHS)[number];

export const NETKIT_MODES = ["l3", "l2"] as const;
export type NetkitMode = (typeof NETKIT_MODES)[number];
export const TEARDOWNS = ["inline", "deferred"] as const;
export type Teardown = (typeof TEARDOWNS)[number];

export const LOG_LEVELS = ["error", "warn", "info", "debug"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface IpamConf {
  type: string;
  [key: string]: unknown;
}

export interface Attachment {
  containerId: string;
  ifname: string;
}

/** Settings of the eBPF fast path. */
export interface FastPathConf {
  enabled: boolean;
  /** Where maps, programs and links are pinned. */
  bpffsRoot: string;
  /** The node's uplink device; undefined = the device of the default route. */
  hostInterface: string | undefined;
  /** The cluster's pod networks: destinations the fast path forwards by FIB lookup. */
  clusterCidrs: string[];
  /**
   * How the programs keep NAT'd flows on the stack: "conntrack" asks the kernel's
   * conntrack (needs a BPF JIT), "memory" remembers flows seen opening, "auto" the first
   * this kernel loads. Node-wide: the first ADD that loads a build on a bpffs root decides.
   */
  natCheck: NatCheckChoice;
  /**
   * Same-node socket bypass: TCP between two local pods of bypass networks spliced at
   * the socket layer (bpf/bpf_sock.c). Off by default; off, too, where the kernel lacks
   * cgroup v2 or sockmap support (ADD still succeeds).
   */
  sockBypass: boolean;
  /** The cgroup v2 directory whose sockets the bypass watches; undefined = the node's root. */
  sockBypassCgroup: string | undefined;
  /**
   * Service translation at connect time (bpf/bpf_svc.c): a pod's socket naming a
   * ClusterIP gets a backend from tables the agent keeps. Off by default; where the kernel
   * cannot run it, ADD fails (code 50) saying what it lacks, rather than leave the pod's
   * Services to whatever else is there.
   */
  serviceTranslation: boolean;
  /** The cgroup v2 directory whose sockets are translated; undefined = the node's root. */
  serviceTranslationCgroup: string | undefined;
  /**
   * NetworkPolicy (bpf/lib/policy.h): each pod's policy, kept by the agent, is judged by
   * the programs; ADD records the pod (by K8S_POD_NAMESPACE/K8S_POD_NAME) and attaches
   * the program that judges what the stack delivers to it. Only the agent's conflists
   * ask for it: without the agent, nothing would write the policies.
   */
  networkPolicy: boolean;
  /**
   * Where a veth pod's programs run on its host device: "tcx" (a link each, pinned, the
   * default) or "tc" (direct-action filters on a clsact qdisc). A filter is added and
   * deleted without waiting for an RCU grace period, where each tcx link waits for one on
   * attach and again on release; a filter has no owner, which CHECK watches for. netkit
   * pods always run theirs on netkit's own hooks.
   */
  podHook: PodHook;
}

export const POD_HOOKS = ["tcx", "tc"] as const;
export type PodHook = (typeof POD_HOOKS)[number];

export const NAT_CHECK_CHOICES = ["auto", "conntrack", "memory"] as const;
export type NatCheckChoice = (typeof NAT_CHECK_CHOICES)[number];

export interface NetConf {
  cniVersion: CniVersion;
  name: string;
  type: string;
  datapath: DatapathChoice;
  /** netkit only: L3 (no ARP, zero MACs) or L2 (explicit MACs). */
  mode: NetkitMode;
  /** MTU for both ends of the pod's device; undefined = the host default route device's. */
  mtu: number | undefined;
  ipam: IpamConf | undefined;
  logFile: string;
  logLevel: LogLevel;
  fastPath: FastPathConf;
  prevResult: Result | undefined;
  /**
   * The pod's DATAPATH_ANNOTATION as the runtime passed it, unchecked: only ADD acts on
   * it (podDatapath() validates), so DEL of a pod ADD refused still succeeds.
   */
  datapathAnnotation: unknown;
  /**
   * The pod's rate limits as received (the config's own keys, else the `bandwidth`
   * capability), unchecked for the same reason: bandwidth.ts's podBandwidth() validates.
   */
  bandwidthRequest: BandwidthRequest | undefined;
  /** GC only: the attachments the runtime still knows about. */
  validAttachments: Attachment[] | undefined;
  /**
   * Set in conflists `netkit-cni agent` writes: the directory where the agent says it has
   * synced (STATUS is not ready until then) and the plugin leaves its verb timings.
   */
  agentStateDir: string | undefined;
  /**
   * Set in conflists `netkit-cni agent --encryption=wireguard` writes: ADD waits (code 11)
   * until the agent's WireGuard device is ready, so no pod talks before its traffic to
   * other nodes is encrypted (datapath/uplink.ts).
   */
  encryption: "none" | "wireguard";
  /**
   * What DEL does with the pod's device pair: "inline" deletes it (each deletion waits
   * out RCU grace periods under RTNL); "deferred" makes it unreachable and inert (down,
   * no routes, no map entries, its address freed) and labels it retired, for the pod's
   * netns teardown, the agent or GC to delete off DEL's path (datapath/retired.ts).
   */
  teardown: Teardown;
  /** The parsed JSON as received, forwarded unchanged to delegated plugins. */
  raw: Record<string, unknown>;
}

export const MAX_CONFIG_BYTES = 1 << 20;

/** Spec: network names start alphanumeric and continue with alphanumerics, `_`, `.`, `-`. */
const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function decodeConfig(stdin: Buffer | string): Record<string, unknown> {
  const text = typeof stdin === "string" ? stdin : stdin.toString("utf8");
  if (Buffer.byteLength(text) > MAX_CONFIG_BYTES) {
    throw new CniError(ErrorCode.DecodeFailure, `network configuration is larger than ${MAX_CONFIG_BYTES} bytes`);
  }
  if (text.trim() === "") throw new CniError(ErrorCode.DecodeFailure, "no network configuration on stdin");
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new CniError(ErrorCode.DecodeFailure, "network configuration is not valid JSON", (e as Error).message);
  }
  if (!isRecord(parsed)) throw new CniError(ErrorCode.DecodeFailure, "network configuration must be a JSON object");
  return parsed;
}

function stringField(raw: Record<string, unknown>, key: string): string | undefined {
  const v = raw[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw invalidConfig(`"${key}" must be a string`);
  return v;
}

function oneOf<T extends string>(raw: Record<string, unknown>, key: string, allowed: readonly T[], fallback: T): T {
  const v = stringField(raw, key);
  if (v === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(v)) {
    throw invalidConfig(`"${key}" must be one of ${allowed.map((a) => `"${a}"`).join(", ")}; got "${v}"`);
  }
  return v as T;
}

function parseMtu(raw: Record<string, unknown>): number | undefined {
  const v = raw.mtu;
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 576 || v > 65535) {
    throw invalidConfig(`"mtu" must be an integer from 576 to 65535; got ${JSON.stringify(v)}`);
  }
  return v;
}

function parseIpam(raw: Record<string, unknown>): IpamConf | undefined {
  const v = raw.ipam;
  if (v === undefined || v === null) return undefined;
  if (!isRecord(v)) throw invalidConfig(`"ipam" must be an object`);
  if (typeof v.type !== "string" || v.type === "") throw invalidConfig(`"ipam.type" is required`);
  // The type names a plugin binary looked up in CNI_PATH: never a path.
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(v.type)) {
    throw invalidConfig(`"ipam.type" must be a plugin name, not a path; got "${v.type}"`);
  }
  return v as IpamConf;
}

function parseFastPath(raw: Record<string, unknown>): FastPathConf {
  const enabled = raw.fastPath ?? true;
  if (typeof enabled !== "boolean") throw invalidConfig(`"fastPath" must be true or false`);
  const bpffsRoot = stringField(raw, "bpffsRoot") ?? DEFAULT_BPFFS_ROOT;
  if (!bpffsRoot.startsWith("/") || bpffsRoot.split("/").includes("..")) {
    throw invalidConfig(`"bpffsRoot" must be an absolute path without ".."; got "${bpffsRoot}"`);
  }
  const hostInterface = stringField(raw, "hostInterface");
  if (hostInterface !== undefined && !/^[^/:\s]{1,15}$/.test(hostInterface)) {
    throw invalidConfig(`"hostInterface" "${hostInterface}" is not a valid interface name`);
  }
  const cidrs = raw.clusterCIDRs ?? [];
  if (!Array.isArray(cidrs) || cidrs.some((c) => typeof c !== "string" || !isCidr(c))) {
    throw invalidConfig(`"clusterCIDRs" must be a list of CIDRs such as "10.244.0.0/16"`);
  }
  const natCheck = raw.natCheck ?? "auto";
  if (!NAT_CHECK_CHOICES.includes(natCheck as NatCheckChoice)) {
    throw invalidConfig(`"natCheck" must be one of ${NAT_CHECK_CHOICES.join(", ")}`);
  }
  const sockBypass = raw.sockBypass ?? false;
  if (typeof sockBypass !== "boolean") throw invalidConfig(`"sockBypass" must be true or false`);
  const sockBypassCgroup = cgroupField(raw, "sockBypassCgroup");
  const serviceTranslation = raw.serviceTranslation ?? false;
  if (typeof serviceTranslation !== "boolean") throw invalidConfig(`"serviceTranslation" must be true or false`);
  const serviceTranslationCgroup = cgroupField(raw, "serviceTranslationCgroup");
  const networkPolicy = raw.networkPolicy ?? false;
  if (typeof networkPolicy !== "boolean") throw invalidConfig(`"networkPolicy" must be true or false`);
  const podHook = raw.podHook ?? "tcx";
  if (!POD_HOOKS.includes(podHook as PodHook)) {
    throw invalidConfig(`"podHook" must be one of ${POD_HOOKS.join(", ")}`);
  }
  return {
    enabled,
    bpffsRoot,
    hostInterface,
    clusterCidrs: cidrs as string[],
    natCheck: natCheck as NatCheckChoice,
    sockBypass,
    sockBypassCgroup,
    serviceTranslation,
    serviceTranslationCgroup,
    networkPolicy,
    podHook: podHook as PodHook,
  };
}

/** A cgroup v2 directory named in the config: an absolute path that cannot climb out. */
function cgroupField(raw: Record<string, unknown>, name: string): string | undefined {
  const dir = stringField(raw, name);
  if (dir !== undefined && (!dir.startsWith("/") || dir.split("/").includes(".."))) {
    throw invalidConfig(`"${name}" must be an absolute path without ".."; got "${dir}"`);
  }
  return dir;
}

/** The annotation from runtimeConfig, if the runtime sent pod annotations at all. */
function readDatapathAnnotation(raw: Record<string, unknown>): unknown {
  const runtimeConfig = raw.runtimeConfig;
  if (!isRecord(runtimeConfig)) return undefined;
  const annotations = runtimeConfig[POD_ANNOTATIONS_CAPABILITY];
  return isRecord(annotations) ? annotations[DATAPATH_ANNOTATION] : undefined;
}

/**
 * The device kind a pod gets: its annotation when present ("veth" or "netkit", nothing
 * else: code 7 naming the annotation), else the network's `datapath`.
 */
export function podDatapath(conf: Pick<NetConf, "datapath" | "datapathAnnotation">): DatapathChoice {
  const v = conf.datapathAnnotation;
  if (v === undefined || v === null) return conf.datapath;
  if (typeof v === "string" && (POD_DATAPATHS as readonly string[]).includes(v)) return v as PodDatapath;
  throw invalidConfig(
    `pod annotation "${DATAPATH_ANNOTATION}" must be one of ${POD_DATAPATHS.map((d) => `"${d}"`).join(", ")}; got ${JSON.stringify(v)}`,
  );
}

function parseValidAttachments(raw: Record<string, unknown>): Attachment[] | undefined {
  const v = raw["cni.dev/valid-attachments"];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw invalidConfig(`"cni.dev/valid-attachments" must be a list`);
  return v.map((a, i) => {
    if (!isRecord(a) || typeof a.containerID !== "string" || typeof a.ifname !== "string") {
      throw invalidConfig(`"cni.dev/valid-attachments"[${i}] must have string "containerID" and "ifname"`);
    }
    return { containerId: a.containerID, ifname: a.ifname };
  });
}

function parseAgentStateDir(raw: Record<string, unknown>): string | undefined {
  const dir = stringField(raw, "agentStateDir");
  if (dir !== undefined && (!dir.startsWith("/") || dir.split("/").includes(".."))) {
    throw invalidConfig(`"agentStateDir" must be an absolute path without ".."; got "${dir}"`);
  }
  return dir;
}

export function parseNetConf(stdin: Buffer | string): NetConf {
  const raw = decodeConfig(stdin);
  const cniVersion = negotiateVersion(raw.cniVersion, raw.cniVersions);
  const name = stringField(raw, "name");
  if (!name) throw invalidConfig(`"name" is required`);
  if (!NETWORK_NAME.test(name)) {
    throw invalidConfig(
      `"name" "${name}" must start with a letter or digit and use only letters, digits, '_', '.', '-'`,
    );
  }
  const type = stringField(raw, "type");
  if (!type) throw invalidConfig(`"type" is required`);
  let prevResult: Result | undefined;
  if (raw.prevResult !== undefined && raw.prevResult !== null) {
    prevResult = parseResult(raw.prevResult, "prevResult");
  }
  return {
    cniVersion,
    name,
    type,
    datapath: oneOf(raw, "datapath", DATAPATHS, "auto"),
    mode: oneOf(raw, "mode", NETKIT_MODES, "l3"),
    mtu: parseMtu(raw),
    ipam: parseIpam(raw),
    logFile: stringField(raw, "logFile") ?? DEFAULT_LOG_FILE,
    logLevel: oneOf(raw, "logLevel", LOG_LEVELS, "info"),
    fastPath: parseFastPath(raw),
    prevResult,
    datapathAnnotation: readDatapathAnnotation(raw),
    bandwidthRequest: readBandwidthRequest(raw),
    validAttachments: parseValidAttachments(raw),
    agentStateDir: parseAgentStateDir(raw),
    encryption: oneOf(raw, "encryption", ["none", "wireguard"] as const, "none"),
    teardown: oneOf(raw, "teardown", TEARDOWNS, "inline"),
    raw,
  };
}
