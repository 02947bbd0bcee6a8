import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ErrorCode } from "../../../src/cni/errors";
import { allocate, check, gc, release, status } from "../../../src/ipam/index";
import { addressesOf, cleanupDirs, cniErrorOf, config, listAllocations, NETWORK, tempDataDir } from "./helpers";

afterEach(cleanupDirs);

/** Allocates one address per container ID (ifname eth0), returning the first address of each. */
function allocateMany(cfg: ReturnType<typeof config>, ids: string[]): string[] {
  return ids.map((id) => addressesOf(allocate(cfg, id, "eth0").ips)[0] as string);
}

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

describe("reserved addresses are never handed out", () => {
  it("IPv4: not the network, the broadcast or the gateway", () => {
    const dataDir = tempDataDir();
    // A /29 has 8 addresses: .0 network, .7 broadcast, .1 gateway by default.
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.3.0.0/29" }]] });
    expect(allocateMany(cfg, ids("c", 5))).toEqual(["10.3.0.2", "10.3.0.3", "10.3.0.4", "10.3.0.5", "10.3.0.6"]);
    expect(cniErrorOf(() => allocate(cfg, "c5", "eth0")).code).toBe(ErrorCode.PluginNotAvailable);
  });

  it("IPv4: an explicit gateway in the middle of the range is skipped", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.3.0.0/29", gateway: "10.3.0.3" }]] });
    expect(allocateMany(cfg, ids("c", 5))).toEqual(["10.3.0.1", "10.3.0.2", "10.3.0.4", "10.3.0.5", "10.3.0.6"]);
  });

  it("IPv6: not the network (subnet-router anycast) or the gateway; the last address is usable", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "fd00:1::/126" }]] });
    expect(allocateMany(cfg, ids("c", 2))).toEqual(["fd00:1::2", "fd00:1::3"]);
    expect(cniErrorOf(() => allocate(cfg, "c2", "eth0")).code).toBe(ErrorCode.PluginNotAvailable);
  });

  it("result carries the subnet's prefix length, the range's gateway, routes and dns", () => {
    const dataDir = tempDataDir();
    const cfg = config({
      dataDir,
      ranges: [[{ subnet: "10.1.0.0/24", rangeStart: "10.1.0.10", rangeEnd: "10.1.0.200", gateway: "10.1.0.1" }]],
      routes: [{ dst: "0.0.0.0/0" }],
      dns: { nameservers: ["10.96.0.10"] },
    });
    expect(allocate(cfg, "pod-a", "eth0")).toEqual({
      interfaces: [],
      ips: [{ address: "10.1.0.10/24", gateway: "10.1.0.1" }],
      routes: [{ dst: "0.0.0.0/0" }],
      dns: { nameservers: ["10.96.0.10"] },
    });
  });
});

describe("round-robin allocation", () => {
  it("continues after the last reserved address instead of reusing a freed one", () => {
    const dataDir = tempDataDir();
    const cfg = config({
      dataDir,
      ranges: [[{ subnet: "10.4.0.0/24", rangeStart: "10.4.0.10", rangeEnd: "10.4.0.14" }]],
    });
    expect(allocateMany(cfg, ["a", "b", "c"])).toEqual(["10.4.0.10", "10.4.0.11", "10.4.0.12"]);
    release(cfg, "a", "eth0");
    expect(allocateMany(cfg, ["d"])).toEqual(["10.4.0.13"]);
    expect(fs.readFileSync(path.join(dataDir, NETWORK, "last_reserved_ip.0"), "utf8")).toBe("10.4.0.13");
  });

  it("wraps around to the start of the range and skips addresses still taken", () => {
    const dataDir = tempDataDir();
    const cfg = config({
      dataDir,
      ranges: [[{ subnet: "10.4.0.0/24", rangeStart: "10.4.0.10", rangeEnd: "10.4.0.13" }]],
    });
    expect(allocateMany(cfg, ["a", "b", "c", "d"])).toEqual(["10.4.0.10", "10.4.0.11", "10.4.0.12", "10.4.0.13"]);
    release(cfg, "b", "eth0");
    release(cfg, "d", "eth0");
    // After .13 comes .10 (taken), then .11 (free).
    expect(allocateMany(cfg, ["e", "f"])).toEqual(["10.4.0.11", "10.4.0.13"]);
  });

  it("walks across the ranges of one set, in order, and wraps to the first", () => {
    const dataDir = tempDataDir();
    const cfg = config({
      dataDir,
      ranges: [
        [
          { subnet: "10.5.0.0/24", rangeStart: "10.5.0.10", rangeEnd: "10.5.0.11" },
          { subnet: "10.6.0.0/24", rangeStart: "10.6.0.20", rangeEnd: "10.6.0.20" },
        ],
      ],
    });
    expect(allocateMany(cfg, ["a", "b", "c"])).toEqual(["10.5.0.10", "10.5.0.11", "10.6.0.20"]);
    expect(allocate(cfg, "b", "eth0").ips[0]?.gateway).toBe("10.5.0.1");
    release(cfg, "a", "eth0");
    const again = allocate(cfg, "d", "eth0");
    expect(again.ips).toEqual([{ address: "10.5.0.10/24", gateway: "10.5.0.1" }]);
  });

  it("starts over from the first range when last_reserved_ip is outside the set (config changed)", () => {
    const dataDir = tempDataDir();
    fs.mkdirSync(path.join(dataDir, NETWORK));
    fs.writeFileSync(path.join(dataDir, NETWORK, "last_reserved_ip.0"), "192.168.7.7");
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.4.0.0/24", rangeStart: "10.4.0.10" }]] });
    expect(allocateMany(cfg, ["a"])).toEqual(["10.4.0.10"]);
  });
});

describe("exhaustion", () => {
  it("a full /30 fails allocate with host-local's message and STATUS with code 50", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.7.0.0/30" }]] });
    status(cfg);
    expect(allocateMany(cfg, ["a"])).toEqual(["10.7.0.2"]);
    const err = cniErrorOf(() => allocate(cfg, "b", "eth0"));
    expect(err.code).toBe(ErrorCode.PluginNotAvailable);
    expect(err.message).toBe("no IP addresses available in range set: 10.7.0.1-10.7.0.2");
    const notReady = cniErrorOf(() => status(cfg));
    expect(notReady.code).toBe(ErrorCode.PluginNotAvailable);
    expect(notReady.message).toMatch(/no IP addresses available in range set 0: 10.7.0.1-10.7.0.2/);
    release(cfg, "a", "eth0");
    status(cfg);
  });

  it("a larger range filled by another writer is reported full by allocate and status", () => {
    const dataDir = tempDataDir();
    const dir = path.join(dataDir, NETWORK);
    fs.mkdirSync(dir);
    // A /22: 1024 addresses, 1021 of them allocatable (.0, .1 gateway and .255 of the last /24 excluded).
    for (let i = 2; i < 1023; i++) fs.writeFileSync(path.join(dir, `10.8.${i >> 8}.${i & 255}`), `x${i}\r\neth0`);
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.8.0.0/22" }]] });
    expect(cniErrorOf(() => allocate(cfg, "c", "eth0")).message).toBe(
      "no IP addresses available in range set: 10.8.0.1-10.8.3.254",
    );
    expect(cniErrorOf(() => status(cfg)).code).toBe(ErrorCode.PluginNotAvailable);
    fs.unlinkSync(path.join(dir, "10.8.1.0"));
    expect(addressesOf(allocate(cfg, "c", "eth0").ips)).toEqual(["10.8.1.0"]);
  });
});

describe("taken addresses after the hint", () => {
  it("past a long run of them (the range wrapped onto long-lived pods) the next free one is found", () => {
    const dataDir = tempDataDir();
    const dir = path.join(dataDir, NETWORK);
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, "last_reserved_ip.0"), "10.1.0.9");
    // 100 taken in a row after the hint: more than are tried one by one.
    for (let i = 10; i < 110; i++) fs.writeFileSync(path.join(dir, `10.1.0.${i}`), `old${i}\r\neth0`);
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] });
    expect(allocateMany(cfg, ["a", "b"])).toEqual(["10.1.0.110", "10.1.0.111"]);
  });
});

describe("idempotence", () => {
  it("a repeated ADD for the same attachment returns the same address, without a second reservation", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }], [{ subnet: "fd00::/64" }]] });
    const first = allocate(cfg, "pod-a", "eth0");
    const second = allocate(cfg, "pod-a", "eth0");
    expect(second).toEqual(first);
    expect(listAllocations(cfg)).toHaveLength(2);
    // Another interface of the same container is another attachment.
    const other = allocate(cfg, "pod-a", "net1");
    expect(addressesOf(other.ips)).toEqual(["10.1.0.3", "fd00::3"]);
  });

  it("release frees only this attachment, and repeating it (or releasing with no store) succeeds", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] });
    release(cfg, "pod-a", "eth0");
    expect(fs.existsSync(path.join(dataDir, NETWORK))).toBe(false);
    allocate(cfg, "pod-a", "eth0");
    allocate(cfg, "pod-a", "net1");
    release(cfg, "pod-a", "eth0");
    release(cfg, "pod-a", "eth0");
    expect(listAllocations(cfg)).toEqual([{ ip: "10.1.0.3", containerId: "pod-a", ifname: "net1" }]);
  });
});

describe("release with the addresses the runtime knows (prevResult)", () => {
  const ranges = [[{ subnet: "10.1.0.0/24" }], [{ subnet: "fd00::/64" }]];

  /** A reservation-named file no reading survives: a symlink to itself (ELOOP). */
  function unreadableReservation(dataDir: string): void {
    const file = path.join(dataDir, NETWORK, "10.1.0.99");
    fs.symlinkSync(file, file);
  }

  it("reads only their files when they cover every range set", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges });
    const a = allocate(cfg, "a", "eth0");
    allocate(cfg, "b", "eth0");
    unreadableReservation(dataDir);
    // Without them, every reservation is read, and that one cannot be.
    expect(cniErrorOf(() => release(cfg, "a", "eth0")).code).toBe(ErrorCode.IoFailure);
    release(
      cfg,
      "a",
      "eth0",
      a.ips.map((ip) => ip.address),
    );
    expect(
      fs
        .readdirSync(path.join(dataDir, NETWORK))
        .filter((n) => /^(10|fd)/.test(n))
        .sort(),
    ).toEqual(["10.1.0.3", "10.1.0.99", "fd00::3"]);
  });

  it("still frees what they miss, and never what another attachment holds", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges });
    allocate(cfg, "a", "eth0");
    allocate(cfg, "b", "eth0");
    // Only the IPv4 address, plus one of b's: a's IPv6 address is found by reading them all.
    release(cfg, "a", "eth0", ["10.1.0.2/24", "10.1.0.3/24"]);
    expect(listAllocations(cfg).map((r) => `${r.ip} ${r.containerId}`)).toEqual(["10.1.0.3 b", "fd00::3 b"]);
  });
});

describe("dual stack and partial failure", () => {
  it("allocates one address per range set", () => {
    const dataDir = tempDataDir();
    const cfg = config({
      dataDir,
      ranges: [[{ subnet: "10.1.0.0/24", gateway: "10.1.0.254" }], [{ subnet: "fd00::/64" }]],
    });
    expect(allocate(cfg, "pod-a", "eth0").ips).toEqual([
      { address: "10.1.0.1/24", gateway: "10.1.0.254" },
      { address: "fd00::2/64", gateway: "fd00::1" },
    ]);
    expect(fs.readFileSync(path.join(dataDir, NETWORK, "last_reserved_ip.1"), "utf8")).toBe("fd00::2");
  });

  it("when the second range set is full, the address taken from the first is released again", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }], [{ subnet: "fd00::/126" }]] });
    allocate(cfg, "a", "eth0");
    allocate(cfg, "b", "eth0");
    const before = listAllocations(cfg);
    const err = cniErrorOf(() => allocate(cfg, "c", "eth0"));
    expect(err.code).toBe(ErrorCode.PluginNotAvailable);
    expect(err.message).toBe("no IP addresses available in range set: fd00::1-fd00::3");
    expect(listAllocations(cfg)).toEqual(before);
  });

  it("a failed retry keeps what the attachment held before the call", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }], [{ subnet: "fd00::/126" }]] });
    allocate(cfg, "a", "eth0");
    allocate(cfg, "b", "eth0");
    // "c" got its IPv4 address earlier (say, before a crash); now IPv6 is full.
    fs.writeFileSync(path.join(dataDir, NETWORK, "10.1.0.9"), "c\r\neth0");
    expect(cniErrorOf(() => allocate(cfg, "c", "eth0")).code).toBe(ErrorCode.PluginNotAvailable);
    expect(listAllocations(cfg).filter((a) => a.containerId === "c")).toEqual([
      { ip: "10.1.0.9", containerId: "c", ifname: "eth0" },
    ]);
  });
});

describe("host-local's on-disk format", () => {
  it("writes <id>\\r\\n<ifname> per address, the last reserved address and a lock file", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }], [{ subnet: "fd00::/64" }]] });
    allocate(cfg, "0123456789abcdef", "eth0");
    const dir = path.join(dataDir, NETWORK);
    expect(fs.readdirSync(dir).sort()).toEqual([
      "10.1.0.2",
      "fd00::2",
      "last_reserved_ip.0",
      "last_reserved_ip.1",
      "lock",
    ]);
    expect(fs.readFileSync(path.join(dir, "10.1.0.2"))).toEqual(Buffer.from("0123456789abcdef\r\neth0"));
    expect(fs.readFileSync(path.join(dir, "fd00::2"))).toEqual(Buffer.from("0123456789abcdef\r\neth0"));
    expect(fs.readFileSync(path.join(dir, "last_reserved_ip.0"))).toEqual(Buffer.from("10.1.0.2"));
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    expect(fs.statSync(path.join(dir, "10.1.0.2")).mode & 0o777).toBe(0o600);
  });

  it("reads, checks and releases a store written the way host-local writes it, legacy files included", () => {
    const dataDir = tempDataDir();
    const dir = path.join(dataDir, NETWORK);
    fs.mkdirSync(dir, { mode: 0o755 });
    const put = (name: string, content: string) => fs.writeFileSync(path.join(dir, name), content, { mode: 0o644 });
    put("lock", "");
    put("10.1.0.2", "hl-a\r\neth0");
    put("10.1.0.3", "hl-a\r\nnet1");
    put("10.1.0.4", "old-b"); // before ifname was recorded
    put("fd00::2", "hl-a\r\neth0");
    put("last_reserved_ip.0", "10.1.0.4");
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }], [{ subnet: "fd00::/64" }]] });

    expect(listAllocations(cfg)).toEqual([
      { ip: "10.1.0.2", containerId: "hl-a", ifname: "eth0" },
      { ip: "10.1.0.3", containerId: "hl-a", ifname: "net1" },
      { ip: "10.1.0.4", containerId: "old-b", ifname: undefined },
      { ip: "fd00::2", containerId: "hl-a", ifname: "eth0" },
    ]);
    check(cfg, "hl-a", "eth0", ["10.1.0.2/24", "fd00::2/64"]);
    check(cfg, "old-b", "eth0", ["10.1.0.4"]);
    // host-local's last_reserved_ip.0 drives round robin; an ADD repeated for hl-a/eth0 is idempotent.
    expect(addressesOf(allocate(cfg, "new-c", "eth0").ips)).toEqual(["10.1.0.5", "fd00::3"]);
    expect(addressesOf(allocate(cfg, "hl-a", "eth0").ips)).toEqual(["10.1.0.2", "fd00::2"]);

    release(cfg, "hl-a", "eth0");
    expect(fs.existsSync(path.join(dir, "10.1.0.2"))).toBe(false);
    expect(fs.existsSync(path.join(dir, "fd00::2"))).toBe(false);
    expect(fs.existsSync(path.join(dir, "10.1.0.3"))).toBe(true);
    // Legacy: nothing names old-b/eth0 exactly, so the file naming only old-b goes.
    release(cfg, "old-b", "eth0");
    expect(fs.existsSync(path.join(dir, "10.1.0.4"))).toBe(false);
  });

  it("ignores files that are not reservations; GC removes temp files left by a crash", () => {
    const dataDir = tempDataDir();
    const dir = path.join(dataDir, NETWORK);
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, "README"), "notes");
    fs.writeFileSync(path.join(dir, ".netkit-cni-tmp.1.abc"), "x\r\neth0");
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] });
    expect(listAllocations(cfg)).toEqual([]);
    expect(gc(cfg, [])).toEqual({ released: [] });
    expect(fs.readdirSync(dir).sort()).toEqual(["README", "lock"]);
  });

  it("a temp file a killed writer left linked to a reservation is replaced, the reservation kept whole", () => {
    const dataDir = tempDataDir();
    const dir = path.join(dataDir, NETWORK);
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] });
    allocate(cfg, "a", "eth0");
    // Killed after linking its reservation in, before removing the temp file.
    fs.linkSync(path.join(dir, "10.1.0.2"), path.join(dir, ".netkit-cni-tmp.pending"));
    expect(addressesOf(allocate(cfg, "b", "eth0").ips)).toEqual(["10.1.0.3"]);
    expect(fs.readFileSync(path.join(dir, "10.1.0.2"), "utf8")).toBe("a\r\neth0");
    expect(fs.readFileSync(path.join(dir, "10.1.0.3"), "utf8")).toBe("b\r\neth0");
    expect(fs.readdirSync(dir).filter((n) => n.startsWith("."))).toEqual([]);
  });
});

describe("check", () => {
  it("with addresses, reads only their files", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] });
    allocate(cfg, "a", "eth0");
    const loop = path.join(dataDir, NETWORK, "10.1.0.99");
    fs.symlinkSync(loop, loop);
    check(cfg, "a", "eth0", ["10.1.0.2/24"]);
    expect(cniErrorOf(() => check(cfg, "a", "eth0", [])).code).toBe(ErrorCode.IoFailure);
  });

  it("passes for the attachment's addresses and fails with code 101 otherwise", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] });
    const missing = cniErrorOf(() => check(cfg, "a", "eth0", []));
    expect(missing.code).toBe(ErrorCode.CheckMismatch);
    allocate(cfg, "a", "eth0");
    allocate(cfg, "b", "eth0");
    check(cfg, "a", "eth0", ["10.1.0.2/32"]);
    check(cfg, "a", "eth0", []);
    const other = cniErrorOf(() => check(cfg, "a", "eth0", ["10.1.0.3"]));
    expect(other.code).toBe(ErrorCode.CheckMismatch);
    expect(other.message).toBe("10.1.0.3 is reserved for b/eth0, not a/eth0");
    const free = cniErrorOf(() => check(cfg, "a", "eth0", ["10.1.0.9/24"]));
    expect(free.message).toMatch(/^10.1.0.9 is not reserved in /);
    expect(cniErrorOf(() => check(cfg, "a", "net1", [])).code).toBe(ErrorCode.CheckMismatch);
  });
});

describe("gc", () => {
  it("frees addresses of attachments that are not valid any more, keeps the rest", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] });
    expect(gc(cfg, [])).toEqual({ released: [] });
    allocate(cfg, "a", "eth0");
    allocate(cfg, "a", "net1");
    allocate(cfg, "b", "eth0");
    fs.writeFileSync(path.join(dataDir, NETWORK, "10.1.0.50"), "a"); // legacy, container a still valid
    fs.writeFileSync(path.join(dataDir, NETWORK, "10.1.0.51"), "z"); // legacy, container z gone
    const { released } = gc(cfg, [{ containerId: "a", ifname: "eth0" }]);
    expect(released.sort()).toEqual(["10.1.0.3", "10.1.0.4", "10.1.0.51"]);
    expect(listAllocations(cfg).map((a) => a.ip)).toEqual(["10.1.0.2", "10.1.0.50"]);
  });
});

describe("status", () => {
  it("is ready before the store exists, without creating it", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir: path.join(dataDir, "not", "yet"), ranges: [[{ subnet: "10.1.0.0/24" }]] });
    status(cfg);
    expect(fs.existsSync(path.join(dataDir, "not"))).toBe(false);
  });

  it("fails with code 50 when the store path is not a directory", () => {
    const dataDir = tempDataDir();
    fs.writeFileSync(path.join(dataDir, NETWORK), "a file");
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] });
    const err = cniErrorOf(() => status(cfg));
    expect(err.code).toBe(ErrorCode.PluginNotAvailable);
    expect(err.message).toBe(`IPAM not ready: ${path.join(dataDir, NETWORK)} is not a directory`);
    // ...and ADD says it cannot write there, as an I/O failure.
    expect(cniErrorOf(() => allocate(cfg, "a", "eth0")).code).toBe(ErrorCode.IoFailure);
  });
});
