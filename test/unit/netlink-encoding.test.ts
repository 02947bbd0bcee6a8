import { describe, expect, it } from "vitest";
import { attr, attrNested, attrString, attrU32, parseAttrs, readString, readU32 } from "../../src/netlink/attrs";
import { newPairMessage } from "../../src/netlink/links";
import { bpfFilterMessage, parseBpfFilter } from "../../src/netlink/tc-filter";

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

describe("tc filters", () => {
  it("asks for a direct-action bpf filter under handle 1, its priority and every protocol in tcm_info", () => {
    const msg = bpfFilterMessage(7, "egress", 3, 42, "nkc_pol");
    expect(msg.readInt32LE(4)).toBe(7); // ifindex
    expect(msg.readUInt32LE(8)).toBe(1); // handle
    expect(msg.readUInt32LE(12)).toBe(0xfffffff3); // clsact's egress hook
    expect(msg.readUInt32LE(16)).toBe((3 << 16) | 0x0300); // priority 3, ETH_P_ALL in network order
    const top = parseAttrs(msg, 20);
    expect(readString(top.get(1))).toBe("bpf");
    const options = parseAttrs(top.get(2) as Buffer);
    expect(readU32(options.get(6))).toBe(42); // TCA_BPF_FD
    expect(readString(options.get(7))).toBe("nkc_pol");
    expect(readU32(options.get(8))).toBe(1); // TCA_BPF_FLAG_ACT_DIRECT
  });

  it("reads a dumped filter's program, and skips a priority's header entry and other devices' filters", () => {
    const header = (ifindex: number) => {
      const b = Buffer.alloc(20);
      b.writeInt32LE(ifindex, 4);
      b.writeUInt32LE((2 << 16) | 0x0300, 16);
      return b;
    };
    const filter = Buffer.concat([
      header(7),
      attrString(1, "bpf"),
      attrNested(2, [attrU32(11, 99), attrString(7, "nkc_from_pod"), attrU32(8, 1)]),
    ]);
    expect(parseBpfFilter(filter, 7, "ingress")).toEqual([
      { hook: "ingress", priority: 2, programId: 99, name: "nkc_from_pod", directAction: true },
    ]);
    expect(parseBpfFilter(Buffer.concat([header(7), attrString(1, "bpf")]), 7, "ingress")).toEqual([]);
    expect(parseBpfFilter(filter, 8, "ingress")).toEqual([]);
  });
});
