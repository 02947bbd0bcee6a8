/**
 * Each pod's table of the flows its NetworkPolicy let through (bpf/lib/policy.h): an LRU
 * keyed like the direct-flow tables (struct nkc_flow_key), so one pod's flows only ever
 * evict its own. Pooled the same way (nkc_pol_flowtabs, nkc_pol_flow_owner,
 * nkc_pol_flow_pool) and for the same reason: a table put into a map of maps costs an
 * RCU grace period.
 */
import { AF_INET } from "../../cni/address";
import { BPF_MAP_TYPE } from "../../sys/bpf-uapi";
import { decodeFlowKey, FLOW_KEY, type FlowKey } from "../fastpath/abi";
import { type FlowTableMaps, tableEntries, tableHolders, withEndpointTable } from "../fastpath/direct";
import type { MapSpec } from "../loader/elf";
import { POL_CT, POLICY_CT_SIZE } from "./abi";

/** What every pod's table looks like; also nkc_pol_flowtabs' inner-map template. */
export const POLICY_CT_SPEC: MapSpec = {
  name: "nkc_pol_ct",
  type: BPF_MAP_TYPE.LRU_HASH,
  keySize: FLOW_KEY.size,
  valueSize: POL_CT.size,
  maxEntries: POLICY_CT_SIZE,
  flags: 0,
};

/** nkc_pol_ct's flags (bpf/include/nkc_policy_abi.h) that user space reads. */
const CT_EGRESS = 1 << 0;
const CT_NODE = 1 << 3;
const CT_CLOSING = 1 << 4;
const CT_FRAGMENT = 1 << 5;

const PACKETS_AT = POL_CT.offsetOf("packets");

/** How long an entry lives past its last packet, by kind (NKC_POL_CT_*_NS). */
const SECOND_NS = 1_000_000_000n;
const LIFETIME_NS = {
  tcp: 432_000n * SECOND_NS,
  closing: 10n * SECOND_NS,
  other: 120n * SECOND_NS,
  icmp: 30n * SECOND_NS,
};

/** Packets or bytes of one flow, by the pod's direction. */
export interface ByDirection {
  egress: bigint;
  ingress: bigint;
}

/** A flow in a pod's table that was counted while flows were recorded. */
export interface CountedFlow extends FlowKey {
  /** Which way it started, for the pod. */
  started: "egress" | "ingress";
  /** Its pod's own node opened it. */
  fromNode: boolean;
  /** TCP: a FIN or RST went by. */
  closing: boolean;
  /** bpf_ktime_get_ns() of a recent packet (refreshed at most every second). */
  seenNs: bigint;
  /** When, on the programs' clock, the table stops vouching for it if no packet comes. */
  expiresNs: bigint;
  packets: ByDirection;
  bytes: ByDirection;
}

function lifetimeNs(proto: number, family: number, closing: boolean): bigint {
  if (proto === 6) return closing ? LIFETIME_NS.closing : LIFETIME_NS.tcp;
  if ((family === AF_INET && proto === 1) || proto === 58) return LIFETIME_NS.icmp;
  return LIFETIME_NS.other;
}

/**
 * The counted flows of the pod behind `hostIfindex` (undefined: it holds no table): its
 * table's entries of its own generation that are flows, not fragments, and carry a count.
 */
export function listCountedFlows(tables: FlowTableMaps, hostIfindex: number): CountedFlow[] | undefined {
  return withEndpointTable(tables, hostIfindex, (table, gen) =>
    tableEntries(table).flatMap(([key, value]): CountedFlow[] => {
      // Most entries of a full table were never counted: skipped before they are decoded.
      if (value.readBigUInt64LE(PACKETS_AT) === 0n && value.readBigUInt64LE(PACKETS_AT + 8) === 0n) return [];
      const e = POL_CT.decode(value);
      if (e.gen !== gen || e.flags & CT_FRAGMENT) return [];
      const [pe, pi] = e.packets as [bigint, bigint];
      if (pe === 0n && pi === 0n) return [];
      const [be, bi] = e.bytes as [bigint, bigint];
      const flow = decodeFlowKey(key);
      const closing = (e.flags & CT_CLOSING) !== 0;
      return [
        {
          ...flow,
          started: e.flags & CT_EGRESS ? "egress" : "ingress",
          fromNode: (e.flags & CT_NODE) !== 0,
          closing,
          seenNs: e.seenNs,
          expiresNs: e.seenNs + lifetimeNs(flow.proto, flow.family, closing),
          packets: { egress: pe, ingress: pi },
          bytes: { egress: be, ingress: bi },
        },
      ];
    }),
  );
}

/** Every local pod's counted flows, by its host ifindex. */
export function listNodeCountedFlows(tables: FlowTableMaps): Map<number, CountedFlow[]> {
  const out = new Map<number, CountedFlow[]>();
  for (const ifindex of tableHolders(tables)) {
    const flows = listCountedFlows(tables, ifindex);
    if (flows) out.set(ifindex, flows);
  }
  return out;
}
