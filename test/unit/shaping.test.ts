/**
 * What the uplink's qdiscs mean for pacing (datapath/shaping.ts pacingOf), and the tcmsg
 * those qdiscs are read from (netlink/qdisc.ts). The qdiscs themselves are made and
 * restored through the executable in test/integration/bandwidth.test.ts.
 */
import { describe, expect, it } from "vitest";
import { OUR_MAJOR, pacingOf } from "../../src/datapath/shaping";
import { attrString } from "../../src/netlink/attrs";
import { parseQdisc, type Qdisc, TC_H_ROOT, tcHandle, tcmsg } from "../../src/netlink/qdisc";

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
