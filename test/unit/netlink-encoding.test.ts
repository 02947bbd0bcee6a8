import * as net from "node:net";
import { describe, expect, it } from "vitest";
import { isIPv4, isIPv6 } from "../../src/cni/address";
import { attr, attrNested, attrString, attrU32, parseAttrs, readString, readU32 } from "../../src/netlink/attrs";
import { ipBytes, ipString, parseCidr } from "../../src/netlink/ip";
import { newPairMessage } from "../../src/netlink/links";

describe("netlink attributes", () => {
  it("pads every attribute, nested ones included, to 4 bytes", () => {
    const name = attrString(3, "eth0"); // 4 header + 5 bytes = 9, padded to 12
    expect(name.length).toBe(12);
    expect(name.readUInt16LE(0)).toBe(9);
    const nested = attrNested(18, [attrString(1, "veth"), name]);
    expect(nested.length % 4).toBe(0);
    expect(nested.readUInt16LE(2) & 0x8000).toBe(0x8000);
    const inner = parseAttrs(nested.subarray(4));
    expect(readString(inner.get(1))).toBe("veth");
    expect(readString(inner.get(3))).toBe("eth0");
  });

  it("decodes what it encodes", () => {
    const buf = Buffer.concat([attrU32(4, 1500), attr(1, Buffer.from([1, 2, 3]))]);
    const m = parseAttrs(buf);
    expect(readU32(m.get(4))).toBe(1500);
    expect([...(m.get(1) ?? [])]).toEqual([1, 2, 3]);
  });

  it("builds a pair message with the peer's namespace fd inside the peer info", () => {
    const msg = newPairMessage("veth", { name: "nkhost", mtu: 1400 }, { name: "eth0", mtu: 1400 }, 7, []);
    const top = parseAttrs(msg, 16);
    expect(readString(top.get(3))).toBe("nkhost");
    const linkinfo = parseAttrs(top.get(18) as Buffer);
    expect(readString(linkinfo.get(1))).toBe("veth");
    const peerInfo = parseAttrs(linkinfo.get(2) as Buffer).get(1) as Buffer;
    const peerAttrs = parseAttrs(peerInfo, 16);
    expect(readString(peerAttrs.get(3))).toBe("eth0");
    expect(peerAttrs.get(28)?.readInt32LE(0)).toBe(7);
  });
});

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
