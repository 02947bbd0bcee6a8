/**
 * Flow records, from the programs to the agent's store: while the agent runs with
 * --flows it turns the programs' recording on (nkc_flow_switch), takes what they pushed
 * onto nkc_flows every `intervalMs`, names both ends and the rule that decided, and
 * hands each record on; what the programs found no room for is counted (nkc_flow_lost)
 * and told with the records. Stopping turns recording off: with nobody reading, a judged
 * flow costs the programs one lookup.
 */
import type { CountedFlow, PolicyEvent } from "../../bpf/index";
import type { FlowEnd, FlowRecord } from "../../flows/record";
import type { PolicyProtocol } from "../policy/model/compile";
import type { JudgedFlow, Judgment } from "../policy/model/judge";
import type { AddressBook } from "./address-book";

/** The programs' side (the policy writer's maps). */
export interface FlowEventSource {
  record(on: boolean): void;
  take(max: number): PolicyEvent[];
  lost(): bigint;
  /** Every local pod's flows counted in its flow table, by host ifindex (flow-ends.ts). */
  counted(): Map<number, CountedFlow[]>;
}

/** What the policy controller knows of a local pod's rules. */
export interface RuleNames {
  /** What rule `bit` of `slot`'s direction is, while `pod` is on that slot ("ns/p ingress[0]", "cnp/rule (Admin Deny)"). */
  ruleOf(pod: string, slot: number, dir: "ingress" | "egress", bit: number): string | undefined;
  /** The NetworkPolicies that isolate `pod` ("namespace/name"). */
  selectedBy(pod: string): string[];
  /** What `pod`'s audit-mode policies would make of a new flow its rules let through; undefined: none selects it. */
  audit(pod: string, dir: "ingress" | "egress", flow: JudgedFlow): Judgment | undefined;
  /** The audit-mode policies that select `pod`. */
  auditedBy(pod: string): string[];
}

export interface FlowContext {
  node: string;
  book: Pick<AddressBook, "end">;
  rules: RuleNames;
  /** The wall clock's nanoseconds minus CLOCK_MONOTONIC's (the programs' clock). */
  wallOffsetNs: bigint;
  /** A local pod's datapath by its address. */
  datapathOf(ip: string): "netkit" | "veth" | undefined;
}

const PROTOCOLS: Record<number, string> = { 1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMPv6", 132: "SCTP" };
const PORTED = new Set([6, 17, 132]);
const TIER_TEXT = { admin: "Admin", networkPolicy: "NetworkPolicy", baseline: "Baseline" } as const;
const REASON_TEXT: Record<string, string> = {
  pending: "pod not judged yet",
  opaque: "no ports to judge",
  incomplete: "policy not written in full",
  fragment: "a later fragment without its first",
};

/** The policies a rule's name comes from: "ns/p ingress[0], ns/q ingress[1]" → ns/p, ns/q; "cnp/rule (Admin Deny)" → cnp. */
export function policiesOfRule(rule: string): string[] {
  const out: string[] = [];
  for (const part of rule.split(", ")) {
    const np = part.match(/^(\S+\/\S+) (?:ingress|egress)\[\d+\]$/);
    const cnp = part.match(/^([^/]+)\/.* \((?:Admin|Baseline) \w+\)$/);
    const name = np?.[1] ?? cnp?.[1];
    if (name && !out.includes(name)) out.push(name);
  }
  return out;
}

function subjectOf(e: PolicyEvent, end: FlowEnd): string {
  return end.kind === "pod" ? `${end.namespace}/${end.pod}` : `ifindex ${e.ifindex}`;
}

/** What decided, for people, and the policies it came from. */
function decidedBy(e: PolicyEvent, subject: string, rules: RuleNames): { policy: string; policies: string[] } {
  if (e.fromNode) return { policy: "from its node", policies: [] };
  if (e.reason === "denied") return { policy: "default deny", policies: rules.selectedBy(subject) };
  if (e.reason === "allowed" && e.tier === "none") return { policy: "no policy", policies: [] };
  const text = REASON_TEXT[e.reason];
  if (text) return { policy: text, policies: [] };
  if (e.rule === undefined || e.tier === "none") return { policy: e.reason, policies: [] };
  const named = rules.ruleOf(subject, e.slot, e.dir, e.rule);
  return named
    ? { policy: named, policies: policiesOfRule(named) }
    : { policy: `${TIER_TEXT[e.tier]} rule ${e.rule} (rules changed since)`, policies: [] };
}

const POLICY_PROTOCOLS: Record<number, PolicyProtocol> = { 6: "TCP", 17: "UDP", 132: "SCTP" };

/**
 * A new flow the pod's rules let through, judged again with its audit-mode policies as
 * if enforced: denied there, the record's verdict is "audit" (let through, would not be)
 * and it names what would deny it. Its own node's flows pass whatever the rules.
 */
function audited(e: PolicyEvent, subject: string, rules: RuleNames, record: FlowRecord): void {
  if (record.verdict !== "forwarded" || e.fromNode) return;
  const remote = e.dir === "egress" ? e.dst : e.src;
  const judgment = rules.audit(subject, e.dir, { remote, protocol: POLICY_PROTOCOLS[e.proto], port: e.dport });
  if (!judgment || judgment.allowed) return;
  record.verdict = "audit";
  record.reason = "audit";
  record.policy = `${judgment.by} (audit)`;
  const named = policiesOfRule(judgment.by);
  record.policies = named.length > 0 ? named : rules.auditedBy(subject);
}

/** One event of the programs as a record. Pure. */
export function flowRecordOf(e: PolicyEvent, ctx: FlowContext): FlowRecord {
  const ported = PORTED.has(e.proto);
  const source = ctx.book.end(e.src, ported ? e.sport : 0);
  const destination = ctx.book.end(e.dst, ported ? e.dport : 0);
  const mine = e.dir === "egress" ? source : destination;
  const subject = subjectOf(e, mine);
  const record: FlowRecord = {
    time: new Date(Number((e.timeNs + ctx.wallOffsetNs) / 1_000_000n)).toISOString(),
    node: ctx.node,
    direction: e.dir,
    subject,
    protocol: PROTOCOLS[e.proto] ?? String(e.proto),
    source,
    destination,
    verdict: e.reason === "allowed" ? "forwarded" : "dropped",
    reason: e.reason,
    ...decidedBy(e, subject, ctx.rules),
    state: e.reason === "revoked" ? "revoked" : "new",
  };
  if (e.tier !== "none") record.tier = e.tier;
  audited(e, subject, ctx.rules, record);
  const datapath = ctx.datapathOf(mine.ip);
  if (datapath) record.datapath = datapath;
  return record;
}

export interface FlowReaderOptions {
  intervalMs: number;
  /**
   * Records taken per turn at most: the loop gets its turn back under a flood. A turn
   * that took a whole batch is followed by the next at once, not after intervalMs: the
   * queue (16384 records) is kept from filling while the loop still gets its turns.
   */
  batch: number;
}

export class FlowReader {
  private timer: NodeJS.Timeout | undefined;
  private lostSeen = 0n;

  constructor(
    private readonly source: FlowEventSource,
    private readonly context: () => FlowContext,
    private readonly sink: { record(r: FlowRecord): void; lost(total: bigint): void },
    private readonly options: FlowReaderOptions = { intervalMs: 100, batch: 4096 },
  ) {}

  start(): void {
    this.source.record(true);
    this.schedule(this.options.intervalMs);
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => {
      const taken = this.poll();
      if (this.timer !== undefined) this.schedule(taken >= this.options.batch ? 0 : this.options.intervalMs);
    }, ms);
  }

  /** One turn: every record waiting (up to a batch), named, handed on. */
  poll(): number {
    const events = this.source.take(this.options.batch);
    if (events.length > 0) {
      const ctx = this.context();
      for (const e of events) this.sink.record(flowRecordOf(e, ctx));
    }
    const lost = this.source.lost();
    if (lost !== this.lostSeen) {
      this.lostSeen = lost;
      this.sink.lost(lost);
    }
    return events.length;
  }

  /** Turns until the queue holds less than a batch: every record made before this call is read. */
  drain(): void {
    while (this.poll() >= this.options.batch) {
      // A full batch: more may wait.
    }
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.source.record(false);
  }
}
