/**
 * A counted flow (a pod's flow table's entry) told as a record: its ends in the order it
 * started, and what let it through, taken from the record of its first packet when the
 * agent read that one (a flow that started before recording, or a Service's flow whose
 * first packet was judged on its backend's address after the DNAT, has none). Pure.
 */
import type { ByDirection, CountedFlow } from "../../bpf/index";
import type { FlowRecord } from "../../flows/record";
import type { AddressBook } from "./address-book";

const PROTOCOLS: Record<number, string> = { 1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMPv6", 132: "SCTP" };
const PORTED = new Set([6, 17, 132]);

/** What the record of a flow's first packet said of it. */
export type FlowStart = Pick<FlowRecord, "verdict" | "reason" | "tier" | "policy" | "policies">;

export interface CountedContext {
  node: string;
  book: Pick<AddressBook, "end">;
  wallOffsetNs: bigint;
  /** A local pod's host ifindex and datapath by its address. */
  endpointOf(ip: string): { hostIfindex: number; datapath: "netkit" | "veth" } | undefined;
  startOf(key: string): FlowStart | undefined;
}

/** A flow's identity in records: who judged it, its protocol and its ends in order. */
export function flowIdentity(r: Pick<FlowRecord, "subject" | "protocol" | "source" | "destination">): string {
  return `${r.subject} ${r.protocol} ${r.source.ip} ${r.source.port} ${r.destination.ip} ${r.destination.port}`;
}

/** Sent is the way the flow started, for the pod: its egress when it opened it. */
function sentAndReceived(flow: CountedFlow, by: ByDirection): { sent: number; received: number } {
  const [sent, received] = flow.started === "egress" ? [by.egress, by.ingress] : [by.ingress, by.egress];
  return { sent: Number(sent), received: Number(received) };
}

/** The record of a counted flow of the pod behind `ifindex`, state "ended", with `packets` and `bytes` (its totals). */
export function countedRecordOf(
  ifindex: number,
  flow: CountedFlow,
  counts: { packets: ByDirection; bytes: ByDirection },
  ctx: CountedContext,
): FlowRecord {
  const ported = PORTED.has(flow.proto);
  const protocol = PROTOCOLS[flow.proto] ?? String(flow.proto);
  /** The flow told with `mine` as the subject pod's end. */
  const told = (mine: CountedFlow["a"], theirs: CountedFlow["a"]) => {
    const [from, to] = flow.started === "egress" ? [mine, theirs] : [theirs, mine];
    const source = ctx.book.end(from.ip, ported ? from.port : 0);
    const destination = ctx.book.end(to.ip, ported ? to.port : 0);
    const own = flow.started === "egress" ? source : destination;
    const subject = own.kind === "pod" ? `${own.namespace}/${own.pod}` : `ifindex ${ifindex}`;
    return { mine, identity: { subject, protocol, source, destination } };
  };
  // The pod's end is the address its endpoint holds; once the pod is gone (its table with
  // it), the one its first packet's record names.
  const aMine = told(flow.a, flow.b);
  const bMine = told(flow.b, flow.a);
  const byEndpoint = (end: CountedFlow["a"]) => ctx.endpointOf(end.ip)?.hostIfindex === ifindex;
  const { mine, identity } = byEndpoint(flow.a)
    ? aMine
    : byEndpoint(flow.b)
      ? bMine
      : ctx.startOf(flowIdentity(bMine.identity)) && !ctx.startOf(flowIdentity(aMine.identity))
        ? bMine
        : aMine;
  const start = ctx.startOf(flowIdentity(identity)) ?? {
    verdict: "forwarded" as const,
    reason: "allowed",
    policy: flow.fromNode
      ? "from its node"
      : identity.destination.kind === "service"
        ? "judged on the Service's backend"
        : "started before it was recorded",
    policies: [],
  };
  const record: FlowRecord = {
    time: new Date(Number((flow.seenNs + ctx.wallOffsetNs) / 1_000_000n)).toISOString(),
    node: ctx.node,
    direction: flow.started,
    ...identity,
    verdict: start.verdict,
    reason: start.reason,
    policy: start.policy,
    policies: start.policies,
    state: "ended",
    packets: sentAndReceived(flow, counts.packets),
    bytes: sentAndReceived(flow, counts.bytes),
  };
  if (start.tier) record.tier = start.tier;
  const datapath = ctx.endpointOf(mine.ip)?.datapath;
  if (datapath) record.datapath = datapath;
  return record;
}
