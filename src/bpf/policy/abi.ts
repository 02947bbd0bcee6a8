/**
 * NetworkPolicy's maps by name and its structs of bpf/include/nkc_policy_abi.h, each
 * declared once as a field table (loader/struct.ts), with the encodings callers use.
 * Pure: no kernel calls.
 */
import { type Family, ipBytes } from "../../cni/address";
import { ENDPOINT_KEY } from "../fastpath/abi";
import { addressText, array, be16, bytes, type StructLayout, struct, u8, u32, u64, u64Key } from "../loader/struct";

export const POLICY_MAP_NAMES = {
  endpoints: "nkc_pol_ep",
  pods: "nkc_pol_pods",
  peers: "nkc_pol_peers",
  ports: "nkc_pol_ports",
  /** Per slot and direction, how the rule bits are read when a ClusterNetworkPolicy applies. */
  tiers: "nkc_pol_tiers",
  vips: "nkc_pol_vips",
  ctTables: "nkc_pol_flowtabs",
  ctOwner: "nkc_pol_flow_owner",
  ctPool: "nkc_pol_flow_pool",
  stats: "nkc_pol_stats",
  events: "nkc_pol_denials",
  /** The node's new flows the rules judged, by direction, deciding tier and verdict (per CPU). */
  verdicts: "nkc_pol_verdicts",
  /** Flow records: the switch the agent turns on (1: record), the queue of records, and those lost to a full queue (per CPU). */
  flowSwitch: "nkc_flow_switch",
  flows: "nkc_flows",
  flowLost: "nkc_flow_lost",
  /** The judgment's per-CPU scratch (programs only). */
  scratch: "nkc_pol_scratch",
} as const;

export const POLICY_RULES = 64;
export const POLICY_CT_SIZE = 2048;

export type PolicyDir = "egress" | "ingress";
export const DIR_CODE: Record<PolicyDir, number> = { egress: 0, ingress: 1 };

export const POL_F_ISOLATED_IN = 1;
export const POL_F_ISOLATED_OUT = 2;
export const POL_F_PENDING = 4;
/** The agent could not write the pod's policy in full: its isolated directions deny everything. */
export const POL_F_INCOMPLETE = 8;
/** Judge (and record) every new flow of the pod, though it may be isolated in no direction: audit mode. */
export const POL_F_WATCH = 16;

/** IPPROTO_* for the protocols a rule's port names; NONE for packets without ports. */
export const POLICY_PROTO = { NONE: 0, TCP: 6, UDP: 17, SCTP: 132 } as const;
export type PolicyProto = keyof typeof POLICY_PROTO;

/** nkc_pol_tier's flags: a NetworkPolicy isolates the pod this way (its rules decide between the tiers). */
export const POL_TIER_F_NETWORK_POLICY = 1;
/** enum nkc_pol_tier_id: which tier decided a denial. */
export const TIER_ID = { none: 0, admin: 1, networkPolicy: 2, baseline: 3 } as const;
export type PolicyTier = keyof typeof TIER_ID;
/** struct nkc_pol_event's rule when no single rule decided. */
export const POL_RULE_NONE = 0xff;

export const PEER_FIXED_BITS = 64;
export const PORT_FIXED_BITS = 48;

/** nkc_pol_ep's value (keyed by host ifindex): the pod's key. */
export const POL_EP = struct("nkc_pol_ep", { podKey: u64 });
/** nkc_pol_pods' value (keyed by the pod's key): its slot, NKC_POL_F_* flags, and the
 * stamp of the rules it is judged by. */
export const POL_POD = struct("nkc_pol_pod", { slot: u32, flags: u32, stamp: u64 });
/** nkc_pol_peers' key (LPM trie): slot, direction and family lead every prefix. */
export const POL_PEER_KEY = struct("nkc_pol_peer_key", {
  prefixlen: u32,
  slot: u32,
  dir: u8,
  family: u8,
  pad: bytes(2),
  addr: bytes(16),
});
/** nkc_pol_ports' key (LPM trie): slot, direction and protocol lead every prefix. */
export const POL_PORT_KEY = struct("nkc_pol_port_key", { prefixlen: u32, slot: u32, dir: u8, proto: u8, port: be16 });
/** nkc_pol_tiers' key: a slot's direction. */
export const POL_TIER_KEY = struct("nkc_pol_tier_key", { slot: u32, dir: u8, pad: bytes(3) });
/** nkc_pol_tiers' value: which rule bits are Admin and Baseline rules, which of them Deny
 * and Pass (lowest bit first), and whether a NetworkPolicy isolates the direction. */
export const POL_TIER = struct("nkc_pol_tier", {
  admin: u64,
  baseline: u64,
  deny: u64,
  pass: u64,
  flags: u32,
  pad: u32,
});
/** A pod's flow table's value (keyed by struct nkc_flow_key): a remembered verdict, and
 * while flows are recorded its packets and bytes by the pod's direction (egress, ingress). */
export const POL_CT = struct("nkc_pol_ct", {
  gen: u64,
  stamp: u64,
  seenNs: u64,
  flags: u32,
  sport: be16,
  dport: be16,
  packets: array(u64, 2),
  bytes: array(u64, 2),
});
/** nkc_pol_stats' value (per CPU): new flows allowed and denied, by direction. */
export const POL_STATS = struct("nkc_pol_stats", { allowed: array(u64, 2), denied: array(u64, 2) });
/** nkc_pol_denials' and nkc_flows' value: a judged packet. */
export const POL_EVENT = struct("nkc_pol_event", {
  timeNs: u64,
  ifindex: u32,
  slot: u32,
  dir: u8,
  family: u8,
  proto: u8,
  reason: u8,
  sport: be16,
  dport: be16,
  src: bytes(16),
  dst: bytes(16),
  tier: u8,
  rule: u8,
  flags: u8,
  pad: bytes(5),
});
/** struct nkc_pol_event's flags: the pod's own node started the flow. */
export const POL_EV_F_NODE = 1;

/** NetworkPolicy's structs, which the node's objects lay out. */
export const POLICY_STRUCTS: readonly StructLayout[] = [
  POL_EP,
  POL_POD,
  POL_PEER_KEY,
  POL_PORT_KEY,
  POL_TIER_KEY,
  POL_TIER,
  POL_CT,
  POL_STATS,
  POL_EVENT,
];

export const policyEndpointValue = (podKey: bigint): Buffer => POL_EP.encode({ podKey });
export const decodePolicyEndpoint = (value: Buffer): bigint => POL_EP.decode(value).podKey;

/** The u64 pod key that keys nkc_pol_pods (and a namespace's, nkc_pol_ns). */
export const podKeyBytes = (podKey: bigint): Buffer => u64Key(podKey);

export const policyPodValue = (slot: number, flags: number, stamp: bigint): Buffer =>
  POL_POD.encode({ slot, flags, stamp });

export interface PolicyPodEntry {
  slot: number;
  flags: number;
  stamp: bigint;
}

export const decodePolicyPod = (v: Buffer): PolicyPodEntry => POL_POD.decode(v);

/** A prefix of one family: its address bytes (4 or 16) and length. */
export interface AddressPrefix {
  family: Family;
  bytes: Buffer;
  length: number;
}

const dirOf = (code: number): PolicyDir => (code === DIR_CODE.egress ? "egress" : "ingress");

/** nkc_pol_peers' key for `prefix` of `slot`, direction `dir`. */
export function peerKey(slot: number, dir: PolicyDir, prefix: AddressPrefix): Buffer {
  return POL_PEER_KEY.encode({
    prefixlen: PEER_FIXED_BITS + prefix.length,
    slot,
    dir: DIR_CODE[dir],
    family: prefix.family,
    addr: prefix.bytes,
  });
}

export function decodePeerKey(k: Buffer): { slot: number; dir: PolicyDir; prefix: string } {
  const key = POL_PEER_KEY.decode(k);
  return {
    slot: key.slot,
    dir: dirOf(key.dir),
    prefix: `${addressText(key.family, key.addr)}/${key.prefixlen - PEER_FIXED_BITS}`,
  };
}

/** nkc_pol_ports' key: `port` the first port of a prefix of `length` bits. */
export function portKey(slot: number, dir: PolicyDir, proto: PolicyProto, port: number, length: number): Buffer {
  return POL_PORT_KEY.encode({
    prefixlen: PORT_FIXED_BITS + length,
    slot,
    dir: DIR_CODE[dir],
    proto: POLICY_PROTO[proto],
    port,
  });
}

export function decodePortKey(k: Buffer): {
  slot: number;
  dir: PolicyDir;
  proto: number;
  port: number;
  length: number;
} {
  const key = POL_PORT_KEY.decode(k);
  return {
    slot: key.slot,
    dir: dirOf(key.dir),
    proto: key.proto,
    port: key.port,
    length: key.prefixlen - PORT_FIXED_BITS,
  };
}

/**
 * A slot's direction as nkc_pol_tiers reads its rule bits when a ClusterNetworkPolicy
 * applies (bpf/include/nkc_policy_abi.h): `admin` and `baseline` the bits of each tier's
 * rules (the lowest bit first), `deny` and `pass` those of them that Deny or Pass (Pass:
 * Admin only), `networkPolicy` whether a NetworkPolicy isolates the pod this way (the
 * bits in neither tier are its rules, deciding between the tiers).
 */
export interface TierValue {
  admin: bigint;
  baseline: bigint;
  deny: bigint;
  pass: bigint;
  networkPolicy: boolean;
}

/** nkc_pol_tiers' key for `slot`'s direction `dir`. */
export const tierKey = (slot: number, dir: PolicyDir): Buffer => POL_TIER_KEY.encode({ slot, dir: DIR_CODE[dir] });

export function decodeTierKey(k: Buffer): { slot: number; dir: PolicyDir } {
  const key = POL_TIER_KEY.decode(k);
  return { slot: key.slot, dir: dirOf(key.dir) };
}

const U64_MASK = (1n << 64n) - 1n;

/** nkc_pol_tiers' value. Throws on a mask that is not 64 bits. */
export function tierValue(v: TierValue): Buffer {
  for (const [name, mask] of Object.entries({ admin: v.admin, baseline: v.baseline, deny: v.deny, pass: v.pass })) {
    if (mask < 0n || mask > U64_MASK) throw new Error(`tier ${name} mask ${mask} is not 64 bits`);
  }
  return POL_TIER.encode({
    admin: v.admin,
    baseline: v.baseline,
    deny: v.deny,
    pass: v.pass,
    flags: v.networkPolicy ? POL_TIER_F_NETWORK_POLICY : 0,
  });
}

export function decodeTierValue(b: Buffer): TierValue {
  const v = POL_TIER.decode(b);
  return {
    admin: v.admin,
    baseline: v.baseline,
    deny: v.deny,
    pass: v.pass,
    networkPolicy: (v.flags & POL_TIER_F_NETWORK_POLICY) !== 0,
  };
}

/** A rule bitmask value (u64). */
export const ruleBits = (bits: bigint): Buffer => u64Key(bits);

/** struct nkc_endpoint_key of a Service ClusterIP (nkc_pol_vips' key). */
export const vipKey = (ip: string, family: Family): Buffer => ENDPOINT_KEY.encode({ family, addr: ipBytes(ip) });

/** struct nkc_pol_stats summed over CPUs. */
export interface PolicyStats {
  allowed: { egress: bigint; ingress: bigint };
  denied: { egress: bigint; ingress: bigint };
}

export function sumPolicyStats(perCpu: readonly Buffer[]): PolicyStats {
  const s: PolicyStats = { allowed: { egress: 0n, ingress: 0n }, denied: { egress: 0n, ingress: 0n } };
  for (const value of perCpu) {
    const { allowed, denied } = POL_STATS.decode(value);
    s.allowed.egress += allowed[DIR_CODE.egress] ?? 0n;
    s.allowed.ingress += allowed[DIR_CODE.ingress] ?? 0n;
    s.denied.egress += denied[DIR_CODE.egress] ?? 0n;
    s.denied.ingress += denied[DIR_CODE.ingress] ?? 0n;
  }
  return s;
}

/** nkc_pol_verdicts' slots (NKC_POL_VERDICT_INDEX): direction, deciding tier, verdict. */
export const POLICY_VERDICT_SLOTS = 16;
export const verdictIndex = (dir: PolicyDir, tier: PolicyTier, allowed: boolean): number =>
  (DIR_CODE[dir] << 3) | (TIER_ID[tier] << 1) | (allowed ? 1 : 0);

/** A count of nkc_pol_verdicts, summed over CPUs. */
export interface PolicyVerdictCount {
  direction: PolicyDir;
  tier: PolicyTier;
  verdict: "allowed" | "denied";
  flows: bigint;
}

/** Every slot of nkc_pol_verdicts (each a __u64 per CPU), named. */
export function sumPolicyVerdicts(read: (index: number) => readonly Buffer[] | undefined): PolicyVerdictCount[] {
  const out: PolicyVerdictCount[] = [];
  for (const direction of ["egress", "ingress"] as const) {
    for (const tier of Object.keys(TIER_ID) as PolicyTier[]) {
      for (const allowed of [true, false]) {
        const flows = (read(verdictIndex(direction, tier, allowed)) ?? []).reduce(
          (n, b) => n + b.readBigUInt64LE(0),
          0n,
        );
        out.push({ direction, tier, verdict: allowed ? "allowed" : "denied", flows });
      }
    }
  }
  return out;
}

export const POLICY_REASONS = {
  0: "allowed",
  1: "denied",
  2: "pending",
  3: "opaque",
  4: "incomplete",
  5: "fragment",
  6: "revoked",
  7: "tier-denied",
} as const;

const TIER_NAMES: Record<number, PolicyTier> = Object.fromEntries(
  Object.entries(TIER_ID).map(([name, id]) => [id, name as PolicyTier]),
);

/** struct nkc_pol_event, as the ring buffer hands it over. */
export interface PolicyEvent {
  timeNs: bigint;
  ifindex: number;
  slot: number;
  dir: PolicyDir;
  family: Family;
  proto: number;
  reason: string;
  sport: number;
  dport: number;
  src: string;
  dst: string;
  /** The tier that decided: none for a denial no rule made (pending, incomplete, opaque, fragment). */
  tier: PolicyTier;
  /** The rule bit (0..63) that decided, undefined when no single rule did (a default deny). */
  rule: number | undefined;
  /** A flow record's: the pod's own node started it (allowed without rules). */
  fromNode: boolean;
}

export function decodePolicyEvent(b: Buffer): PolicyEvent {
  const e = POL_EVENT.decode(b);
  return {
    timeNs: e.timeNs,
    ifindex: e.ifindex,
    slot: e.slot,
    dir: dirOf(e.dir),
    family: e.family as Family,
    proto: e.proto,
    reason: POLICY_REASONS[e.reason as keyof typeof POLICY_REASONS] ?? `reason ${e.reason}`,
    sport: e.sport,
    dport: e.dport,
    src: addressText(e.family, e.src),
    dst: addressText(e.family, e.dst),
    tier: TIER_NAMES[e.tier] ?? "none",
    rule: e.rule === POL_RULE_NONE ? undefined : e.rule,
    fromNode: (e.flags & POL_EV_F_NODE) !== 0,
  };
}
