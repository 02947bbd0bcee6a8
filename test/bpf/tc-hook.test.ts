/**
 * tc's clsact hook by netlink (src/netlink/tc-filter.ts), on a real veth between two
 * namespaces we build: a program added as a direct-action filter judges the device's
 * frames, its replacement takes its place as the one filter there, deleting it opens the
 * hook again, and a second device beside it carries nothing it was not given.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { RtnlSocket } from "../../src/netlink/socket";
import { attachBpfFilter, deleteBpfFilter, ensureClsact, listBpfFilters } from "../../src/netlink/tc-filter";
import { closeFd, objGetInfo, progLoad } from "../../src/sys/bpf-syscall";
import { BPF_PROG_TYPE } from "../../src/sys/bpf-uapi";
import { openNetns } from "../../src/sys/netns";
import { TestNetns } from "./helpers/test-netns";

let left: TestNetns;
let right: TestNetns;
const fds: number[] = [];

/** r0 = verdict; exit: TC_ACT_UNSPEC (-1) lets the frame on, TC_ACT_SHOT (2) drops it. */
function verdictProgram(verdict: number, name: string): number {
  const insns = Buffer.alloc(16);
  insns.writeUInt8(0xb7, 0);
  insns.writeInt32LE(verdict, 4);
  insns.writeUInt8(0x95, 8);
  const fd = progLoad({ progType: BPF_PROG_TYPE.SCHED_CLS, insns, license: "GPL", name, logLevel: 0, logSize: 0 });
  fds.push(fd);
  return fd;
}

/** struct bpf_prog_info's id (after its u32 type). */
const programId = (fd: number) => objGetInfo(fd, 8).readUInt32LE(4);

const pings = (to: string) => {
  try {
    left.run("ping", "-c", "1", "-W", "1", to);
    return true;
  } catch {
    return false;
  }
};

beforeAll(() => {
  left = TestNetns.create("tcl");
  right = TestNetns.create("tcr");
  for (const i of [0, 1]) {
    left.ip("link", "add", `tc${i}`, "type", "veth", "peer", "name", `tc${i}p`, "netns", right.name);
    left.ip("addr", "add", `10.77.${i}.1/24`, "dev", `tc${i}`);
    left.ip("link", "set", `tc${i}`, "up");
    right.ip("addr", "add", `10.77.${i}.2/24`, "dev", `tc${i}p`);
    right.ip("link", "set", `tc${i}p`, "up");
  }
});

afterAll(() => {
  for (const fd of fds) closeFd(fd);
  left?.destroy();
  right?.destroy();
});

it("a direct-action filter judges the device's frames, is replaced in place and deleted, and stays on its device", async () => {
  const drop = verdictProgram(2, "nkb_drop");
  const pass = verdictProgram(-1, "nkb_pass");
  const fd = openNetns(right.path);
  const sock = RtnlSocket.open(fd);
  try {
    const dev = right.link("tc0p").ifindex;
    const other = right.link("tc1p").ifindex;
    expect(pings("10.77.0.2")).toBe(true);
    // No clsact yet: nothing to list.
    expect(await listBpfFilters(sock, dev, "ingress")).toEqual([]);

    await ensureClsact(sock, dev);
    await ensureClsact(sock, dev); // already there: fine
    await attachBpfFilter(sock, dev, "ingress", 1, drop, "nkb_drop");
    expect(await listBpfFilters(sock, dev, "ingress")).toEqual([
      { hook: "ingress", priority: 1, programId: programId(drop), name: "nkb_drop", directAction: true },
    ]);
    expect(pings("10.77.0.2")).toBe(false);
    // The other device and the other hook carry nothing.
    expect(pings("10.77.1.2")).toBe(true);
    expect(await listBpfFilters(sock, other, "ingress")).toEqual([]);
    expect(await listBpfFilters(sock, dev, "egress")).toEqual([]);

    // Replaced in place: still one filter, now the other program.
    await attachBpfFilter(sock, dev, "ingress", 1, pass, "nkb_pass");
    expect(await listBpfFilters(sock, dev, "ingress")).toEqual([
      { hook: "ingress", priority: 1, programId: programId(pass), name: "nkb_pass", directAction: true },
    ]);
    expect(pings("10.77.0.2")).toBe(true);

    // The egress hook is its own: dropping the replies there stops the ping again.
    await attachBpfFilter(sock, dev, "egress", 2, drop, "nkb_drop");
    expect((await listBpfFilters(sock, dev, "egress")).map((f) => f.priority)).toEqual([2]);
    expect(pings("10.77.0.2")).toBe(false);

    expect(await deleteBpfFilter(sock, dev, "egress", 2)).toBe(true);
    expect(await deleteBpfFilter(sock, dev, "egress", 2)).toBe(false);
    expect(await deleteBpfFilter(sock, dev, "ingress", 1)).toBe(true);
    expect(await listBpfFilters(sock, dev, "ingress")).toEqual([]);
    expect(pings("10.77.0.2")).toBe(true);
  } finally {
    sock.close();
    closeFd(fd);
  }
});
