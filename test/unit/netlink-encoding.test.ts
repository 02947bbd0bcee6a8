import { describe, expect, it } from "vitest";
import { attr, attrNested, attrString, attrU32, parseAttrs, readString, readU32 } from "../../src/netlink/attrs";
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
