/**
 * The field tables C structs are declared by (src/bpf/loader/struct.ts): offsets,
 * sizes and alignment by C's rules, encode and decode each other's inverse, a field left
 * out encodes as zero, network order where C says __be16.
 */
import { describe, expect, it } from "vitest";
import { BANDWIDTH } from "../../src/bpf/bandwidth/abi";
import { CIDR_KEY, FLOW_KEY } from "../../src/bpf/fastpath/abi";
import { array, be16, bytes, cName, scalar, struct, u8, u16, u32, u64 } from "../../src/bpf/loader/struct";
import {
  decodePolicyEvent,
  decodeTierKey,
  decodeTierValue,
  POL_EVENT,
  POL_RULE_NONE,
  POL_TIER,
  POL_TIER_F_NETWORK_POLICY,
  POL_TIER_KEY,
  TIER_ID,
  tierKey,
  tierValue,
} from "../../src/bpf/policy/abi";
import { SVC, SVC_CLIENT, SVC_PAIR } from "../../src/bpf/svc/abi";

const offsets = (s: { fields: readonly { cName: string; offset: number }[] }) =>
  Object.fromEntries(s.fields.map((f) => [f.cName, f.offset]));

describe("a struct's layout", () => {
  it("puts each field at the next multiple of its alignment, and pads the size to the struct's", () => {
    const s = struct("t", { a: u8, b: u32, c: u8, d: u64, e: u16 });
    expect(offsets(s)).toEqual({ a: 0, b: 4, c: 8, d: 16, e: 24 });
    expect(s.size).toBe(32);
    expect(s.align).toBe(8);
    expect(struct("bytes_only", { a: bytes(3), b: u8 }).size).toBe(4);
  });

  it("matches the C headers' layouts", () => {
    expect(offsets(SVC)).toEqual({ id: 0, backends: 4, flags: 6, pad: 7, affinity_secs: 8, pad2: 12 });
    expect(SVC.size).toBe(16);
    expect(offsets(CIDR_KEY)).toEqual({ prefixlen: 0, family: 4, addr: 5, pad: 21 });
    expect(offsets(FLOW_KEY)).toEqual({
      addr_a: 0,
      addr_b: 16,
      port_a: 32,
      port_b: 34,
      family: 36,
      proto: 37,
      pad: 38,
    });
    expect(BANDWIDTH.offsetOf("ingressMode")).toBe(82);
    expect(BANDWIDTH.size).toBe(88);
    expect(SVC_PAIR.size).toBe(48);
    expect(SVC_CLIENT.size).toBe(544);
    expect(POL_EVENT.offsetOf("dst")).toBe(40);
    expect(POL_EVENT.offsetOf("tier")).toBe(56);
    expect(POL_EVENT.offsetOf("rule")).toBe(57);
    expect(POL_EVENT.size).toBe(64);
    expect(offsets(POL_TIER)).toEqual({ admin: 0, baseline: 8, deny: 16, pass: 24, flags: 32, pad: 36 });
    expect(POL_TIER.size).toBe(40);
    expect(POL_TIER_KEY.size).toBe(8);
  });

  it("names each field as C does", () => {
    expect(["hostIfindex", "addrA", "pad2", "v", "lastGen"].map(cName)).toEqual([
      "host_ifindex",
      "addr_a",
      "pad2",
      "v",
      "last_gen",
    ]);
  });

  it("refuses a field it does not have", () => {
    expect(() => SVC.offsetOf("nope" as never)).toThrow(/struct nkc_svc has no field nope/);
  });
});

describe("encoding", () => {
  const inner = struct("inner", { x: u32, y: be16 });
  const outer = struct("outer", { a: u64, in: inner, list: array(u16, 3), raw: bytes(4) });

  it("decodes what it encodes, in the host's order and, for __be16, the network's", () => {
    const value = { a: 1n << 40n, in: { x: 0x01020304, y: 0x0a0b }, list: [1, 2, 3], raw: Buffer.from([9, 8, 7, 6]) };
    const buf = outer.encode(value);
    expect(buf.length).toBe(outer.size);
    expect(buf.readUInt32LE(outer.offsetOf("in"))).toBe(0x01020304);
    expect(buf.subarray(outer.offsetOf("in") + 4, outer.offsetOf("in") + 6)).toEqual(Buffer.from([0x0a, 0x0b]));
    expect(outer.decode(buf)).toEqual(value);
  });

  it("leaves what is not given zero, as a designated initialiser does, nested fields too", () => {
    const buf = outer.encode({ in: { y: 1 }, raw: Buffer.from([5]) });
    expect(outer.decode(buf)).toEqual({ a: 0n, in: { x: 0, y: 1 }, list: [0, 0, 0], raw: Buffer.from([5, 0, 0, 0]) });
  });

  it("decodes at an offset, and refuses a buffer too short", () => {
    const buf = Buffer.concat([Buffer.alloc(3), inner.encode({ x: 7, y: 8 })]);
    expect(inner.decode(buf, 3)).toEqual({ x: 7, y: 8 });
    expect(() => inner.decode(Buffer.alloc(4))).toThrow(/struct inner is 8 bytes, 4 given/);
  });

  it("refuses what does not fit", () => {
    expect(() => outer.encode({ raw: Buffer.alloc(5) })).toThrow(RangeError);
    expect(() => outer.encode({ list: [1, 2, 3, 4] })).toThrow(RangeError);
  });

  it("writes scalars as the maps hold them", () => {
    expect(scalar(u32, 0x01020304)).toEqual(Buffer.from([4, 3, 2, 1]));
    expect(scalar(be16, 0x0102)).toEqual(Buffer.from([1, 2]));
  });
});

describe("NetworkPolicy's tiers and events", () => {
  it("encodes a slot's tiers as nkc_pol_tiers holds them, and reads them back", () => {
    expect(tierKey(7, "ingress")).toEqual(Buffer.from([7, 0, 0, 0, 1, 0, 0, 0]));
    expect(decodeTierKey(tierKey(0x10203, "egress"))).toEqual({ slot: 0x10203, dir: "egress" });
    const value = { admin: 0b11n, baseline: 1n << 63n, deny: 0b10n | (1n << 63n), pass: 0b1n, networkPolicy: true };
    const buf = tierValue(value);
    expect(buf.length).toBe(40);
    expect(buf.readBigUInt64LE(24)).toBe(1n);
    expect(buf.readUInt32LE(32)).toBe(POL_TIER_F_NETWORK_POLICY);
    expect(decodeTierValue(buf)).toEqual(value);
    expect(decodeTierValue(tierValue({ ...value, networkPolicy: false })).networkPolicy).toBe(false);
    expect(() => tierValue({ ...value, deny: 1n << 64n })).toThrow(/tier deny mask/);
  });

  it("reads the tier and rule that decided a denial from an event, none where no rule did", () => {
    const event = (reason: number, tier: number, rule: number) =>
      POL_EVENT.encode({ ifindex: 3, dir: 1, family: 2, proto: 6, reason, src: Buffer.alloc(16), tier, rule });
    expect(decodePolicyEvent(event(7, TIER_ID.admin, 5))).toMatchObject({
      reason: "tier-denied",
      tier: "admin",
      rule: 5,
    });
    expect(decodePolicyEvent(event(6, TIER_ID.baseline, 63))).toMatchObject({
      reason: "revoked",
      tier: "baseline",
      rule: 63,
    });
    expect(decodePolicyEvent(event(1, TIER_ID.networkPolicy, POL_RULE_NONE))).toMatchObject({
      reason: "denied",
      tier: "networkPolicy",
      rule: undefined,
    });
    expect(decodePolicyEvent(event(2, TIER_ID.none, POL_RULE_NONE))).toMatchObject({ tier: "none", rule: undefined });
  });
});
