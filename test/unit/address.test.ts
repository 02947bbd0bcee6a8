import * as net from "node:net";
import { describe, expect, it } from "vitest";
import {
  AF_INET,
  AF_INET6,
  canonicalAddress,
  hostPrefix,
  ipBytes,
  ipString,
  isCidr,
  isIPv4,
  isIPv6,
  parseCidr,
  parseSubnet,
} from "../../src/cni/address";

describe("IP parsing", () => {
  it.each([
    ["10.1.2.3", "0a010203"],
    ["::1", "00000000000000000000000000000001"],
    ["fd00:1::5", "fd000001000000000000000000000005"],
    ["::ffff:10.0.0.1", "00000000000000000000ffff0a000001"],
  ])("encodes %s", (ip, hex) => {
    expect(ipBytes(ip).toString("hex")).toBe(hex);
  });

  it.each(["10.1.2.3", "fd00:1::5", "::", "fe80::1", "2001:db8:0:1:1:1:1:1", "1::2:0:0:3"])("round-trips %s", (ip) => {
    expect(ipString(ipBytes(ip))).toBe(ip);
  });

  it("parses CIDRs and rejects bad ones", () => {
    expect(parseCidr("10.0.0.0/8")).toEqual({ family: 2, address: "10.0.0.0", prefixLength: 8 });
    expect(parseCidr("fd00::1")).toEqual({ family: 10, address: "fd00::1", prefixLength: 128 });
    expect(() => parseCidr("10.0.0.0/33")).toThrow();
    expect(() => parseCidr("nope/8")).toThrow();
  });

  it.each([
    ["10.0.0.0/8", true],
    ["fd00::/128", true],
    ["0.0.0.0/0", true],
    ["10.0.0.0", false],
    ["10.0.0.0/33", false],
    ["fd00::/129", false],
    ["10.0.0.0/0008", false],
    ["10.0.0.0/8/8", false],
    ["fe80::1%eth0/64", false],
    ["10.0.0.0/", false],
  ] as const)("isCidr(%j) is %s", (text, valid) => {
    expect(isCidr(text)).toBe(valid);
  });

  it("makes each pod address a host prefix", () => {
    expect(hostPrefix("10.1.0.5/24")).toEqual({ family: AF_INET, address: "10.1.0.5", prefixLength: 32 });
    expect(hostPrefix("fd00::5/64")).toEqual({ family: AF_INET6, address: "fd00::5", prefixLength: 128 });
  });

  it("writes addresses as host-local names its files (Go's net.IP.String())", () => {
    expect(canonicalAddress("fd00:0:0::0:5")).toBe("fd00::5");
    expect(canonicalAddress("10.1.0.5/24")).toBeUndefined();
  });

  it("parses subnets and names the network when host bits are set", () => {
    expect(parseSubnet("10.1.0.0/24")).toMatchObject({ ok: true, subnet: { family: AF_INET, prefixLength: 24 } });
    expect(parseSubnet("10.1.0.5/24")).toEqual({ ok: false, why: "host-bits", network: "10.1.0.0" });
    expect(parseSubnet("10.1.0.0")).toEqual({ ok: false, why: "syntax" });
  });
});

describe("address recognition", () => {
  // node:net's answers are the reference (minus zone suffixes, which we refuse).
  const samples = [
    "10.1.2.3",
    "0.0.0.0",
    "255.255.255.255",
    "256.1.1.1",
    "01.2.3.4",
    "1.2.3",
    "1.2.3.4.5",
    "1..2.3",
    "a.b.c.d",
    "::",
    "::1",
    "1::",
    "fe80::1",
    "2001:db8::8a2e:370:7334",
    "1:2:3:4:5:6:7:8",
    "1:2:3:4:5:6:7::",
    "1:2:3:4:5:6:7:8:9",
    "1:2:3:4:5:6:7:8::",
    ":::",
    "1:::2",
    "::ffff:10.0.0.1",
    "::ffff:10.0.0.256",
    "12345::",
    "g::1",
    ":1",
    "1:",
    "",
    "1::2::3",
    "::1.2.3.4",
    "1:2:3:4:5:6:1.2.3.4",
    "1:2:3:4:5:6:7:1.2.3.4",
  ];
  it.each(samples)("%j is classified as node:net classifies it", (text) => {
    expect(isIPv4(text)).toBe(net.isIPv4(text));
    expect(isIPv6(text)).toBe(net.isIPv6(text));
  });
});
