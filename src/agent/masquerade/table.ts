/**
 * Masquerade for pods: what a pod sends to a destination outside the cluster's pod
 * CIDRs (and outside --no-masquerade-cidr) leaves the node with the node's address as
 * its source, IPv4 and IPv6, as kindnet does. It lives in an nftables table of the
 * agent's own (`inet netkit-cni-agent`), written whole by one `nft -f` transaction that
 * deletes the previous table and adds the new one: a packet sees the old rules or the
 * new, never none. Tables of others are not read or touched.
 *
 * The fast path already leaves such flows to the stack (it redirects only destinations
 * inside the cluster CIDRs), so their packets meet this table's postrouting hook.
 */
import { spawnSync } from "node:child_process";
import { AF_INET, AF_INET6, type Family, parseSubnet } from "../../cni/address";

export const MASQUERADE_TABLE = "netkit-cni-agent";

const byFamily = (cidrs: string[], family: Family) =>
  cidrs.filter((c) => {
    const s = parseSubnet(c);
    return s.ok && s.subnet.family === family;
  });

const set = (name: string, type: string, cidrs: string[]) =>
  [
    `  set ${name} {`,
    `    type ${type}; flags interval;`,
    cidrs.length > 0 ? `    elements = { ${cidrs.join(", ")} }` : "",
    "  }",
  ]
    .filter(Boolean)
    .join("\n");

/** The table's text: pods (source in the cluster CIDRs) to anything else, masqueraded. */
export function masqueradeRuleset(clusterCidrs: string[], noMasqueradeCidrs: string[]): string {
  const pods4 = byFamily(clusterCidrs, AF_INET);
  const pods6 = byFamily(clusterCidrs, AF_INET6);
  const keep4 = [...pods4, ...byFamily(noMasqueradeCidrs, AF_INET)];
  const keep6 = [...pods6, ...byFamily(noMasqueradeCidrs, AF_INET6)];
  const rules: string[] = [];
  if (pods4.length > 0) rules.push("    ip saddr @pods4 ip daddr != @direct4 masquerade");
  if (pods6.length > 0) rules.push("    ip6 saddr @pods6 ip6 daddr != @direct6 masquerade");
  return [
    `table inet ${MASQUERADE_TABLE} {`,
    set("pods4", "ipv4_addr", pods4),
    set("direct4", "ipv4_addr", keep4),
    set("pods6", "ipv6_addr", pods6),
    set("direct6", "ipv6_addr", keep6),
    "  chain postrouting {",
    // After the node's own source NAT rules (srcnat is 100): theirs decide first.
    "    type nat hook postrouting priority srcnat + 10; policy accept;",
    ...rules,
    "  }",
    "}",
  ].join("\n");
}

function nft(input: string): void {
  const r = spawnSync("nft", ["-f", "-"], { input, encoding: "utf8", timeout: 10_000 });
  if (r.error) throw new Error(`nft: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`nft: ${r.stderr.trim() || `exit status ${r.status}`}`);
}

/** Replaces the table atomically (created when missing: a table declared empty first). */
export function applyMasquerade(ruleset: string): void {
  nft(`table inet ${MASQUERADE_TABLE}\ndelete table inet ${MASQUERADE_TABLE}\n${ruleset}\n`);
}

/** Removes the table (--masquerade=false: someone else masquerades). */
export function removeMasquerade(): void {
  nft(`table inet ${MASQUERADE_TABLE}\ndelete table inet ${MASQUERADE_TABLE}\n`);
}

/** The table as the kernel has it now; undefined when there is none. */
export function currentMasquerade(): string | undefined {
  const r = spawnSync("nft", ["list", "table", "inet", MASQUERADE_TABLE], { encoding: "utf8", timeout: 10_000 });
  return r.status === 0 ? r.stdout : undefined;
}
