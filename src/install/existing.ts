/**
 * What `install` finds in the CNI config directory of a node already running a generic
 * plugin it can take over live: the reference `bridge` or `ptp`. Their pods keep working
 * after the swap (the node answers for ours on their subnet, see datapath/coexist.ts),
 * and their DEL comes to us with the node's current config, which releases their
 * addresses only if our network has their name and IPAM store. So install says what it
 * found, which name and store to reuse, and writes ours under a name that sorts first.
 * Reads files only; never changes them.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { DEFAULT_DATA_DIR } from "../ipam/index";

/** Plugin types whose pods survive a swap to netkit-cni. */
const REPLACEABLE = new Set(["bridge", "ptp"]);

/** The name ours gets when a replaceable config would otherwise sort before it. */
export const SWAP_CONFLIST_NAME = "00-netkit-cni.conflist";

export interface ExistingNetwork {
  file: string;
  type: string;
  network: string;
  /** The bridge device (bridge only; the plugin's default is cni0). */
  bridge: string | undefined;
  ipamType: string | undefined;
  /** host-local's store; undefined for IPAM that keeps none we can share. */
  dataDir: string | undefined;
  subnets: string[];
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: unknown) => (typeof v === "string" ? v : undefined);

/** Config files a runtime would read, in the order it reads them. */
export function configFiles(confDir: string): string[] {
  return fs
    .readdirSync(confDir)
    .filter((f) => /\.(conflist|conf|json)$/.test(f) && !f.startsWith("."))
    .sort();
}

/** The bridge/ptp networks configured in `confDir`, in the runtime's order. */
export function findReplaceable(confDir: string): ExistingNetwork[] {
  if (!fs.existsSync(confDir)) return [];
  const found: ExistingNetwork[] = [];
  for (const file of configFiles(confDir)) {
    let conf: unknown;
    try {
      conf = JSON.parse(fs.readFileSync(path.join(confDir, file), "utf8"));
    } catch {
      continue;
    }
    const network = describe(file, conf);
    if (network) found.push(network);
  }
  return found;
}

/** A conflist's first plugin, or a single-plugin .conf, if it is a bridge or ptp. */
export function describe(file: string, conf: unknown): ExistingNetwork | undefined {
  if (!isRecord(conf)) return undefined;
  const first = Array.isArray(conf.plugins) ? conf.plugins[0] : conf;
  if (!isRecord(first)) return undefined;
  const type = str(first.type);
  const network = str(conf.name);
  if (!type || !REPLACEABLE.has(type) || !network) return undefined;
  const ipam = isRecord(first.ipam) ? first.ipam : {};
  const ipamType = str(ipam.type);
  const subnets: string[] = [];
  if (Array.isArray(ipam.ranges)) {
    for (const set of ipam.ranges) {
      if (!Array.isArray(set)) continue;
      for (const r of set) if (isRecord(r) && str(r.subnet)) subnets.push(r.subnet as string);
    }
  } else if (str(ipam.subnet)) {
    subnets.push(ipam.subnet as string);
  }
  return {
    file,
    type,
    network,
    bridge: type === "bridge" ? (str(first.bridge) ?? "cni0") : undefined,
    ipamType,
    dataDir: ipamType === "host-local" ? (str(ipam.dataDir) ?? DEFAULT_DATA_DIR) : undefined,
    subnets,
  };
}

/** Our side of the comparison: the network name and store of the conflist being installed. */
export interface OurNetwork {
  name: string;
  dataDir: string | undefined;
  podCidrs: string[];
}

/** What to tell the admin about taking over `theirs`: notes, and warnings when it would not work. */
export function takeoverAdvice(theirs: ExistingNetwork, ours: OurNetwork): { notes: string[]; warnings: string[] } {
  const where = [
    theirs.bridge && `on ${theirs.bridge}`,
    theirs.ipamType && `${theirs.ipamType} IPAM`,
    theirs.dataDir && `store ${theirs.dataDir}`,
    theirs.subnets.join(", "),
  ].filter(Boolean);
  const notes = [`found ${theirs.file}: ${theirs.type} network "${theirs.network}" (${where.join(", ")})`];
  const warnings: string[] = [];
  if (!theirs.dataDir) {
    warnings.push(
      `${theirs.file} uses ${theirs.ipamType ?? "no"} IPAM, whose store netkit-cni cannot share: ` +
        "its pods' addresses may be handed out again",
    );
    return { notes, warnings };
  }
  const sameName = ours.name === theirs.network;
  const sameStore = path.resolve(ours.dataDir ?? DEFAULT_DATA_DIR) === path.resolve(theirs.dataDir);
  if (sameName && sameStore) {
    notes.push(
      `reusing its network name "${theirs.network}" and store ${theirs.dataDir}: new pods get addresses ` +
        "its pods do not have, and their DEL (which comes to netkit-cni now) releases theirs",
    );
  } else {
    warnings.push(
      `to keep addresses disjoint from ${theirs.file}'s pods and release theirs on DEL, reuse its network name ` +
        `and store: --network-name ${theirs.network} --data-dir ${theirs.dataDir}`,
    );
  }
  const missing = theirs.subnets.filter((s) => !ours.podCidrs.includes(s));
  if (missing.length > 0 && ours.podCidrs.length > 0) {
    warnings.push(`${theirs.file}'s pods are in ${missing.join(", ")}, which --pod-cidr does not name`);
  }
  return { notes, warnings };
}
