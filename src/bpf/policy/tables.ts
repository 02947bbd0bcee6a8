/**
 * A compiled policy as the programs read it (bpf/lib/policy.h): per direction, two
 * longest-prefix tables whose values are rule bitmasks, one for remote prefixes and one
 * for ports. A flow is allowed when the two lookups share a bit. Pure.
 *
 * The peers table holds every prefix any rule names (a selected pod's address as a host
 * prefix, an ipBlock's cidr and each of its excepts); an entry's value is the set of
 * rules that allow every address of it. Because the prefixes nest, an address's longest
 * match E tells the truth for it: every cidr or except that contains the address is an
 * entry too, so it contains E. An except becomes an entry whose value lacks its rule's
 * bit (a hole in the rule), while another peer of the same or another rule may still
 * allow the addresses inside. The ports table is built the same way from port ranges,
 * each split into aligned blocks (prefixes of the 16-bit port).
 *
 * Rewriting a slot in place (slotChanges) is ordered so that, at every step, each
 * address's verdict is the old one or the new one, never a third: additions and updates
 * from the longest prefix to the shortest (a hole is in place before the block around
 * it), then deletions from the shortest to the longest. That holds for a change of the
 * peers alone; when the ports change, rule numbers change meaning, and the policy goes
 * to a new slot instead (the agent's controller decides).
 */
import { type Family, formatSubnet, hostMask, parseSubnet, type Subnet } from "../../cni/address";
import { type AddressPrefix, POLICY_RULES, type PolicyDir, type PolicyProto, peerKey, portKey, ruleBits } from "./abi";

export interface DatapathPortRange {
  protocol: "TCP" | "UDP" | "SCTP";
  from: number;
  to: number;
}

/** One rule of a direction: the peers and ports it allows ("any": every one). */
export interface DatapathRule {
  peers: { cidr: string; except: string[] }[] | "any";
  ports: DatapathPortRange[] | "any";
}

export interface DirectionTables {
  /** Canonical prefix text ("10.1.0.0/16") → rule bits. */
  peers: Map<string, bigint>;
  /** "TCP 8080/16" (protocol, first port, prefix bits) → rule bits. */
  ports: Map<string, bigint>;
}

export type SlotTables = Record<PolicyDir, DirectionTables>;

const ANY_V4 = "0.0.0.0/0";
const ANY_V6 = "::/0";

function subnet(text: string): Subnet {
  const s = parseSubnet(text);
  if (!s.ok) throw new Error(`not a prefix: ${text}`);
  return s.subnet;
}

const inside = (inner: Subnet, outer: Subnet): boolean =>
  inner.family === outer.family &&
  outer.prefixLength <= inner.prefixLength &&
  (inner.network & ~hostMask(outer.family, outer.prefixLength)) === outer.network;

/** The peers table of one direction. */
export function peerTable(rules: readonly DatapathRule[]): Map<string, bigint> {
  if (rules.length > POLICY_RULES) throw new Error(`${rules.length} rules, over the ${POLICY_RULES} a direction holds`);
  const prefixes = new Map<string, Subnet>();
  const add = (text: string) => {
    const s = subnet(text);
    prefixes.set(formatSubnet(s), s);
  };
  const blocks: { rule: number; cidr: Subnet; except: Subnet[] }[] = [];
  rules.forEach((rule, r) => {
    const peers =
      rule.peers === "any"
        ? [
            { cidr: ANY_V4, except: [] },
            { cidr: ANY_V6, except: [] },
          ]
        : rule.peers;
    for (const p of peers) {
      add(p.cidr);
      for (const e of p.except) add(e);
      blocks.push({ rule: r, cidr: subnet(p.cidr), except: p.except.map(subnet) });
    }
  });
  // A host prefix without holes is one entry's alone: looked up, not compared with all.
  const hostBits = new Map<string, bigint>();
  const wide = blocks.filter((b) => {
    const host = b.cidr.prefixLength === (b.cidr.family === 2 ? 32 : 128) && b.except.length === 0;
    if (host) {
      const text = formatSubnet(b.cidr);
      hostBits.set(text, (hostBits.get(text) ?? 0n) | (1n << BigInt(b.rule)));
    }
    return !host;
  });
  const table = new Map<string, bigint>();
  for (const [text, e] of prefixes) {
    let bits = hostBits.get(text) ?? 0n;
    for (const b of wide) {
      if (inside(e, b.cidr) && !b.except.some((x) => inside(e, x))) bits |= 1n << BigInt(b.rule);
    }
    table.set(text, bits);
  }
  return table;
}

/** [from, to] as aligned blocks: [first port, prefix bits] (at most 30). */
export function portBlocks(from: number, to: number): [number, number][] {
  const out: [number, number][] = [];
  let lo = from;
  while (lo <= to) {
    let size = lo === 0 ? 65536 : lo & -lo; // the largest block aligned at lo
    while (lo + size - 1 > to) size /= 2;
    out.push([lo, 16 - Math.log2(size)]);
    lo += size;
  }
  return out;
}

const NO_PORT_PROTOS: readonly PolicyProto[] = ["TCP", "UDP", "SCTP", "NONE"];

/** The ports table of one direction. */
export function portTable(rules: readonly DatapathRule[]): Map<string, bigint> {
  const entries = new Map<string, { proto: PolicyProto; lo: number; hi: number }>();
  const ranges: { rule: number; proto: PolicyProto; from: number; to: number }[] = [];
  rules.forEach((rule, r) => {
    const list =
      rule.ports === "any"
        ? NO_PORT_PROTOS.map((proto) => ({ protocol: proto, from: 0, to: 65535 }))
        : rule.ports.map((p) => ({ ...p, protocol: p.protocol as PolicyProto }));
    for (const p of list) {
      ranges.push({ rule: r, proto: p.protocol, from: p.from, to: p.to });
      for (const [port, bits] of portBlocks(p.from, p.to)) {
        entries.set(`${p.protocol} ${port}/${bits}`, { proto: p.protocol, lo: port, hi: port + 2 ** (16 - bits) - 1 });
      }
    }
  });
  const table = new Map<string, bigint>();
  for (const [text, e] of entries) {
    let bits = 0n;
    for (const r of ranges) if (r.proto === e.proto && r.from <= e.lo && e.hi <= r.to) bits |= 1n << BigInt(r.rule);
    table.set(text, bits);
  }
  return table;
}

export function slotTables(rules: Record<PolicyDir, readonly DatapathRule[]>): SlotTables {
  return {
    egress: { peers: peerTable(rules.egress), ports: portTable(rules.egress) },
    ingress: { peers: peerTable(rules.ingress), ports: portTable(rules.ingress) },
  };
}

/** One write to a table: a value to set, or undefined to delete the key. */
export interface TableWrite {
  key: Buffer;
  value: Buffer | undefined;
}

const prefixOf = (text: string): AddressPrefix => {
  const s = subnet(text);
  const width = s.family === 2 ? 4 : 16;
  return {
    family: s.family as Family,
    bytes: Buffer.from(s.network.toString(16).padStart(width * 2, "0"), "hex"),
    length: s.prefixLength,
  };
};

const portPrefixOf = (text: string): { proto: PolicyProto; port: number; length: number } => {
  const [proto, rest] = text.split(" ") as [PolicyProto, string];
  const [port, length] = rest.split("/").map(Number) as [number, number];
  return { proto, port, length };
};

/**
 * The writes that turn `before` into `after` in one table, in the order that keeps every
 * lookup's answer the old one or the new one (the header comment says why).
 */
function orderedWrites(
  before: ReadonlyMap<string, bigint>,
  after: ReadonlyMap<string, bigint>,
  lengthOf: (text: string) => number,
  keyOf: (text: string) => Buffer,
): TableWrite[] {
  const sets = [...after]
    .filter(([text, bits]) => before.get(text) !== bits)
    .sort((a, b) => lengthOf(b[0]) - lengthOf(a[0]));
  const deletes = [...before.keys()].filter((text) => !after.has(text)).sort((a, b) => lengthOf(a) - lengthOf(b));
  return [
    ...sets.map(([text, bits]) => ({ key: keyOf(text), value: ruleBits(bits) })),
    ...deletes.map((text) => ({ key: keyOf(text), value: undefined })),
  ];
}

/** The writes to the peers and ports tries that turn slot `slot`'s `before` into `after`. */
export function slotWrites(
  slot: number,
  before: SlotTables | undefined,
  after: SlotTables | undefined,
): { peers: TableWrite[]; ports: TableWrite[] } {
  const empty: DirectionTables = { peers: new Map(), ports: new Map() };
  const out = { peers: [] as TableWrite[], ports: [] as TableWrite[] };
  for (const dir of ["ingress", "egress"] as const) {
    const b = before?.[dir] ?? empty;
    const a = after?.[dir] ?? empty;
    out.peers.push(
      ...orderedWrites(
        b.peers,
        a.peers,
        (t) => prefixOf(t).length,
        (t) => peerKey(slot, dir, prefixOf(t)),
      ),
    );
    out.ports.push(
      ...orderedWrites(
        b.ports,
        a.ports,
        (t) => portPrefixOf(t).length,
        (t) => {
          const p = portPrefixOf(t);
          return portKey(slot, dir, p.proto, p.port, p.length);
        },
      ),
    );
  }
  return out;
}

/** Do two slots' ports tables match (so their rules mean the same, and peers may change in place)? */
export function samePorts(a: SlotTables, b: SlotTables): boolean {
  const same = (x: ReadonlyMap<string, bigint>, y: ReadonlyMap<string, bigint>) =>
    x.size === y.size && [...x].every(([k, v]) => y.get(k) === v);
  return same(a.egress.ports, b.egress.ports) && same(a.ingress.ports, b.ingress.ports);
}
