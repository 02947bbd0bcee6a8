/**
 * What the uplink's qdiscs mean for pacing (datapath/shaping.ts pacingOf), and the tcmsg
 * those qdiscs are read from (netlink/qdisc.ts), and the tbf an ingress limit gets where
 * the kernel has no fq (datapath/pod-shaping.ts). The qdiscs themselves are made and
 * restored through the executable in test/integration/bandwidth.test.ts.
 */
import { describe, expect, it } from "vitest";
import { tbfSettings } from "../../src/datapath/pod-shaping";
import { OUR_MAJOR, pacingOf } from "../../src/datapath/shaping";
import { attrString } from "../../src/netlink/attrs";
import { parseQdisc, type Qdisc, TC_H_ROOT, tbfOptions, tcHandle, tcmsg } from "../../src/netlink/qdisc";

const q = (kind: string, handle: number, parent: number): Qdisc => ({ ifindex: 3, handle, parent, kind });
const ours = tcHandle(OUR_MAJOR, 0);

describe("pacingOf", () => {
  it("takes the kernel's defaults (handle 0) as ours to replace", () => {
    expect(pacingOf([q("noqueue", 0, TC_H_ROOT)]).state).toBe("default");
    expect(pacingOf([q("pfifo_fast", 0, TC_H_ROOT)]).state).toBe("default");
    const defaultMq = [q("mq", 0, TC_H_ROOT), q("pfifo_fast", 0, tcHandle(0, 1)), q("pfifo_fast", 0, tcHandle(0, 2))];
    expect(pacingOf(defaultMq).state).toBe("default");
    expect(pacingOf([]).state).toBe("default");
  });

  it("uses a root fq, ours or not, and tells ours apart", () => {
    expect(pacingOf([q("fq", ours, TC_H_ROOT)])).toMatchObject({ state: "paces", ours: true });
    expect(pacingOf([q("fq", tcHandle(0x8001, 0), TC_H_ROOT)])).toMatchObject({ state: "paces", ours: false });
  });

  it("uses mq only when every child is fq", () => {
    const mq = (kids: string[]) => [
      q("mq", ours, TC_H_ROOT),
      ...kids.map((k, i) => q(k, tcHandle(0x8001 + i, 0), tcHandle(OUR_MAJOR, i + 1))),
    ];
    expect(pacingOf(mq(["fq", "fq"]))).toMatchObject({ state: "paces", ours: true, description: "mq 4e4b: with 2 fq" });
    // Half made (one queue still on its default): ours to make again, not pacing.
    expect(pacingOf(mq(["fq", "pfifo_fast"])).state).toBe("default");
    expect(pacingOf(mq([])).state).toBe("default");
    // Someone else's mq over fq children paces; over others it is theirs.
    const theirs = (kid: string) => [q("mq", tcHandle(1, 0), TC_H_ROOT), q(kid, tcHandle(2, 0), tcHandle(1, 1))];
    expect(pacingOf(theirs("fq"))).toMatchObject({ state: "paces", ours: false });
    expect(pacingOf(theirs("fq_codel")).state).toBe("foreign");
  });

  it("leaves an admin's qdisc alone", () => {
    expect(pacingOf([q("htb", tcHandle(1, 0), TC_H_ROOT)])).toEqual({ state: "foreign", description: "htb 1:" });
    expect(pacingOf([q("tbf", tcHandle(0x8002, 0), TC_H_ROOT)]).state).toBe("foreign");
  });
});

describe("tcmsg", () => {
  it("lays out family, ifindex, handle and parent as the kernel reads them, and parses a reply", () => {
    const msg = tcmsg(7, tcHandle(OUR_MAJOR, 0), TC_H_ROOT);
    expect(msg.length).toBe(20);
    expect([msg.readUInt8(0), msg.readInt32LE(4), msg.readUInt32LE(8), msg.readUInt32LE(12)]).toEqual([
      0, 7, 0x4e4b0000, 0xffffffff,
    ]);
    const reply = Buffer.concat([msg, attrString(1, "fq")]);
    expect(parseQdisc(reply)).toEqual({ ifindex: 7, handle: 0x4e4b0000, parent: TC_H_ROOT, kind: "fq" });
  });
});

describe("tbfSettings: an ingress limit where the kernel has no fq", () => {
  it("is the limit in bytes, with a queue of 100 ms at the rate", () => {
    expect(tbfSettings({ rate: 100_000_000, burst: 500_000 }, 1500)).toEqual({
      rate: 12_500_000,
      burst: 62_500,
      limit: 1_250_000,
    });
  });

  it("bounds the queue by the rate, not by a runtime's huge burst, with room for two GSO packets", () => {
    // containerd's burst: 2^32 - 1 bits, 512 MiB.
    expect(tbfSettings({ rate: 10_000_000, burst: 4294967295 }, 1500)).toEqual({
      rate: 1_250_000,
      burst: 536_870_911,
      limit: 131_072,
    });
  });

  it("makes the burst at least one full frame, which tbf would otherwise never send", () => {
    expect(tbfSettings({ rate: 1_000_000, burst: 8_000 }, 9000).burst).toBe(9014);
  });
});

describe("tbfOptions", () => {
  it("carries the rate in the struct and as a u64, the burst in bytes, the queue bound", () => {
    const [parms, rate64, burst] = tbfOptions({ rate: 5_000_000_000, burst: 70_000, limit: 1_000_000 });
    // struct tc_tbf_qopt after the 4-byte attribute header: the rate's link layer named
    // (Ethernet: no rate table needed), its 32-bit rate saturated, then limit at 24.
    expect(parms?.readUInt16LE(2)).toBe(1);
    expect(parms?.readUInt8(4 + 1)).toBe(1);
    expect(parms?.readUInt32LE(4 + 8)).toBe(0xffffffff);
    expect(parms?.readUInt32LE(4 + 24)).toBe(1_000_000);
    expect(rate64?.readUInt16LE(2)).toBe(4);
    expect(rate64?.readBigUInt64LE(4)).toBe(5_000_000_000n);
    expect(burst?.readUInt16LE(2)).toBe(6);
    expect(burst?.readUInt32LE(4)).toBe(70_000);
  });
});
