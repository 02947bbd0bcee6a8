/**
 * NetworkPolicy's tables as the programs read them (src/bpf/policy/tables.ts): the
 * longest match of a remote address and of a port each give the rules that allow it,
 * excepts carve holes, and a slot rewritten in place answers every lookup with the old
 * policy or the new one at each step, never with something neither allows.
 */
import { describe, expect, it } from "vitest";
import { decodePeerKey, decodePortKey } from "../../src/bpf/policy/abi";
import {
  type DatapathRule,
  peerTable,
  portBlocks,
  portTable,
  slotTables,
  slotWrites,
} from "../../src/bpf/policy/tables";
import { parseAddress, parseSubnet } from "../../src/cni/address";

/** The longest prefix of `table` holding `ip`, and its bits (0n when none). */
function lookup(table: ReadonlyMap<string, bigint>, ip: string): bigint {
  const a = parseAddress(ip);
  if (!a) throw new Error(ip);
  let best = -1;
  let bits = 0n;
  for (const [text, v] of table) {
    const s = parseSubnet(text);
    if (!s.ok || s.subnet.family !== a.family) continue;
    const bitsOf = a.family === 2 ? 32 : 128;
    const mask = ((1n << BigInt(bitsOf)) - 1n) ^ ((1n << BigInt(bitsOf - s.subnet.prefixLength)) - 1n);
    if ((a.value & mask) === s.subnet.network && s.subnet.prefixLength > best) {
      best = s.subnet.prefixLength;
      bits = v;
    }
  }
  return bits;
}

const portLookup = (table: ReadonlyMap<string, bigint>, proto: string, port: number): bigint => {
  let best = -1;
  let bits = 0n;
  for (const [text, v] of table) {
    const [p, rest] = text.split(" ") as [string, string];
    const [first, len] = rest.split("/").map(Number) as [number, number];
    if (p !== proto || port < first || port >= first + 2 ** (16 - len) || len <= best) continue;
    best = len;
    bits = v;
  }
  return bits;
};

describe("the peers table", () => {
  it("gives each address the rules of its longest prefix: pods, blocks, holes, and a pod inside a hole", () => {
    const rules: DatapathRule[] = [
      { peers: [{ cidr: "10.0.0.0/8", except: ["10.1.0.0/16"] }], ports: "any" },
      {
        peers: [
          { cidr: "10.1.2.3/32", except: [] },
          { cidr: "10.9.9.9/32", except: [] },
        ],
        ports: "any",
      },
      { peers: "any", ports: [{ protocol: "TCP", from: 53, to: 53 }] },
    ];
    const t = peerTable(rules);
    expect(lookup(t, "10.2.3.4")).toBe(0b101n);
    expect(lookup(t, "10.1.7.7")).toBe(0b100n); // in the hole: rule 0 no more
    expect(lookup(t, "10.1.2.3")).toBe(0b110n); // in the hole, but a pod rule 1 names
    expect(lookup(t, "10.9.9.9")).toBe(0b111n); // inside the block and a pod of rule 1
    expect(lookup(t, "192.0.2.1")).toBe(0b100n);
    expect(lookup(t, "fd00::1")).toBe(0b100n);
  });

  it("refuses more rules than a direction holds", () => {
    const rules = Array.from({ length: 65 }, () => ({ peers: "any" as const, ports: "any" as const }));
    expect(() => peerTable(rules)).toThrow(/65 rules/);
  });
});

describe("the ports table", () => {
  it("splits a range into aligned blocks that cover exactly it", () => {
    for (const [from, to] of [
      [1, 65535],
      [0, 65535],
      [8080, 8080],
      [1000, 2000],
      [32768, 60999],
    ] as const) {
      const covered: number[] = [];
      for (const [port, bits] of portBlocks(from, to)) {
        expect(port % 2 ** (16 - bits)).toBe(0);
        for (let p = port; p < port + 2 ** (16 - bits); p++) covered.push(p);
      }
      expect(covered).toEqual(Array.from({ length: to - from + 1 }, (_, i) => from + i));
    }
    expect(portBlocks(1, 65535).length).toBeLessThanOrEqual(30);
  });

  it("gives each protocol and port the rules whose ranges hold it; portless packets only rules without ports", () => {
    const t = portTable([
      { peers: "any", ports: [{ protocol: "TCP", from: 80, to: 90 }] },
      {
        peers: "any",
        ports: [
          { protocol: "TCP", from: 85, to: 85 },
          { protocol: "UDP", from: 53, to: 53 },
        ],
      },
      { peers: "any", ports: "any" },
    ]);
    expect(portLookup(t, "TCP", 80)).toBe(0b101n);
    expect(portLookup(t, "TCP", 85)).toBe(0b111n);
    expect(portLookup(t, "TCP", 91)).toBe(0b100n);
    expect(portLookup(t, "UDP", 53)).toBe(0b110n);
    expect(portLookup(t, "SCTP", 85)).toBe(0b100n);
    expect(portLookup(t, "NONE", 0)).toBe(0b100n);
  });
});

describe("rewriting a slot in place", () => {
  /** A small deterministic generator (the test must fail the same way twice). */
  function rng(seed: number) {
    let s = seed;
    return () => {
      s = (s * 1103515245 + 12345) & 0x7fffffff;
      return s / 0x7fffffff;
    };
  }

  /** Random peers inside 10.0.0.0/28 (prefixes /28 to /32, with holes). */
  function randomRules(next: () => number): DatapathRule[] {
    const prefix = () => {
      const len = 28 + Math.floor(next() * 5);
      const host = Math.floor(next() * 16) & ~((1 << (32 - len)) - 1);
      return `10.0.0.${host}/${len}`;
    };
    return Array.from({ length: 1 + Math.floor(next() * 4) }, () => ({
      peers: Array.from({ length: 1 + Math.floor(next() * 3) }, () => {
        const cidr = prefix();
        const c = parseSubnet(cidr);
        const excepts = Array.from({ length: Math.floor(next() * 2) }, prefix).filter((e) => {
          const x = parseSubnet(e);
          return (
            c.ok &&
            x.ok &&
            x.subnet.prefixLength > c.subnet.prefixLength &&
            x.subnet.network >> BigInt(32 - c.subnet.prefixLength) ===
              c.subnet.network >> BigInt(32 - c.subnet.prefixLength)
          );
        });
        return { cidr, except: excepts };
      }),
      ports: "any" as const,
    }));
  }

  it("answers every address with the old bits or the new ones at every step (500 random changes)", () => {
    const next = rng(42);
    const addresses = Array.from({ length: 16 }, (_, i) => `10.0.0.${i}`);
    for (let round = 0; round < 500; round++) {
      const before = slotTables({ ingress: randomRules(next), egress: [] });
      const after = slotTables({ ingress: randomRules(next), egress: [] });
      const live = new Map(before.ingress.peers);
      const writes = slotWrites(7, before, after).peers;
      for (const w of writes) {
        const { prefix } = decodePeerKey(w.key);
        if (w.value) live.set(prefix, w.value.readBigUInt64LE(0));
        else live.delete(prefix);
        for (const ip of addresses) {
          const now = lookup(live, ip);
          const ok = now === lookup(before.ingress.peers, ip) || now === lookup(after.ingress.peers, ip);
          if (!ok) throw new Error(`round ${round}: ${ip} reads ${now} after writing ${prefix}`);
        }
      }
      expect(live).toEqual(after.ingress.peers);
    }
  });

  it("writes nothing for an unchanged slot, and every key of the slot's own number", () => {
    const rules = { ingress: randomRules(rng(1)), egress: randomRules(rng(2)) };
    expect(slotWrites(3, slotTables(rules), slotTables(rules))).toEqual({ peers: [], ports: [] });
    const all = slotWrites(3, undefined, slotTables(rules));
    expect(all.peers.every((w) => decodePeerKey(w.key).slot === 3)).toBe(true);
    expect(all.ports.every((w) => decodePortKey(w.key).slot === 3)).toBe(true);
  });
});
