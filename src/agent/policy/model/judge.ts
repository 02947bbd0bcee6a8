/**
 * One direction of a compiled policy (compile.ts) judging a new flow, as the programs do
 * (bpf/lib/policy.h, nkc_pol_decide): the first Admin rule that matches decides (Pass
 * skips the rest of the tier); then, where a NetworkPolicy isolates the direction, a
 * matching rule allows and none denies; then the first Baseline rule that matches;
 * else allowed. A rule matches when both the remote address (in a block, outside its
 * excepts) and the port (of the flow's protocol, in a range) do; a flow without ports
 * (ICMP) matches only rules that name no port.
 *
 * The agent judges here what the datapath does not: an audit-mode policy's verdict on a
 * flow the enforced rules let through (flows/reader.ts). Pure.
 */
import { addressBits, parseAddress, parseSubnet } from "../../../cni/address";
import type { CompiledRule, DirectionPolicy, PolicyProtocol, TierRule } from "./compile";

export interface JudgedFlow {
  /** The other end's address. */
  remote: string;
  /** undefined for what carries no ports. */
  protocol: PolicyProtocol | undefined;
  /** The port the flow was opened towards. */
  port: number;
}

export interface Judgment {
  allowed: boolean;
  /** What decided: a rule's origin ("ns/p ingress[0]", "cnp/rule (Admin Deny)"), "default deny" or "no rule". */
  by: string;
}

function inBlock(cidr: string, remote: string): boolean {
  const subnet = parseSubnet(cidr);
  const addr = parseAddress(remote);
  if (!subnet.ok || !addr || addr.family !== subnet.subnet.family) return false;
  const { network, prefixLength } = subnet.subnet;
  const bits = addressBits(addr.family);
  return addr.value >> BigInt(bits - prefixLength) === network >> BigInt(bits - prefixLength);
}

export function ruleMatches(rule: CompiledRule, flow: JudgedFlow): boolean {
  const peer =
    rule.peers === "any" ||
    rule.peers.some((b) => inBlock(b.cidr, flow.remote) && !b.except.some((e) => inBlock(e, flow.remote)));
  if (!peer) return false;
  if (rule.ports === "any") return true;
  return rule.ports.some((r) => r.protocol === flow.protocol && flow.port >= r.from && flow.port <= r.to);
}

const tierName = (tier: "Admin" | "Baseline", r: TierRule) => `${r.policy}/${r.rule} (${tier} ${r.action})`;

export function judgeDirection(direction: DirectionPolicy | undefined, flow: JudgedFlow): Judgment {
  if (!direction) return { allowed: true, by: "no rule" };
  const admin = direction.admin?.find((r) => ruleMatches(r, flow));
  if (admin && admin.action !== "Pass") return { allowed: admin.action === "Accept", by: tierName("Admin", admin) };
  if (!direction.unisolated) {
    const rule = direction.rules.find((r) => ruleMatches(r, flow));
    return rule ? { allowed: true, by: rule.origin } : { allowed: false, by: "default deny" };
  }
  const baseline = direction.baseline?.find((r) => ruleMatches(r, flow));
  if (baseline) return { allowed: baseline.action !== "Deny", by: tierName("Baseline", baseline) };
  return { allowed: true, by: "no rule" };
}
