/**
 * `netkit-cni endpoints` as people and scripts read it: the default table keeps to the
 * columns read at a glance, `-o wide` shows every one, `-o json` (and `--json`) the rows
 * themselves; a format it does not print is a usage error (exit status 2).
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { type EndpointView, formatEndpoints, withPodNames } from "../../src/cli/endpoints";
import { runCli } from "../../src/cli/index";
import { render } from "../../src/cli/output";
import type { EndpointRow } from "../../src/commands/endpoints";

const NARROW = ["POD", "IFNAME", "DATAPATH", "ADDRESSES", "REDIRECTED", "STACK", "DROPPED", "POLICY"];
const WIDE = [
  "POD",
  "CONTAINER",
  "IFNAME",
  "HOST DEVICE",
  "DATAPATH",
  "ADDRESSES",
  "BPF",
  "REDIRECTED",
  "STACK",
  "DROPPED",
  "WHY",
  "FLOWS",
  "EVICTED",
  "SPLICED",
  "OVER BOUND",
  "FOREIGN NS",
  "LIMITS",
  "LIMIT DROPS",
  "SVC AFFINITY",
  "SVC NO STATE",
  "SVC GIVEN UP",
  "POLICY",
];

/** A plain pod (nothing but the fast path) and one with every feature on. */
const plain = (): EndpointRow => ({
  containerId: "0123456789abcdef0123",
  ifname: "eth0",
  hostDevice: "nk0123abcd",
  datapath: "netkit",
  addresses: ["10.244.1.5", "fd00::5"],
  programsAttached: true,
  counters: {
    redirectedLocal: 1,
    redirectedFib: 2,
    redirectedNeigh: 3,
    redirectedPeer: 4,
    passedStack: 5,
    passedStackUnproven: 6,
    droppedSpoofed: 7,
    droppedOther: 8,
  },
  drops: { spoofed: 7, tagged: 0, ethertype: 0, unparsable: 0, limit: 0, rewrite: 0, policy: 8 },
  flowTable: { entries: 3, capacity: 1024, evicted: 0, remembered: 3, forgotten: 0 },
  bypassedSockets: 0,
  sockCounters: undefined,
  sockRecord: undefined,
  limits: undefined,
  services: undefined,
  policy: undefined,
});

const busy = (): EndpointRow => ({
  ...plain(),
  containerId: "fedcba9876543210fedc",
  hostDevice: "nkfedcba98",
  addresses: ["10.244.1.6"],
  bypassedSockets: 2,
  sockRecord: { netnsCookie: "18446744073709551615", sockets: 2, bound: 4096, refusedBound: 1, refusedNetns: 0 },
  limits: {
    mode: "edt",
    ingressMode: "police",
    pacedIfindex: 2,
    ingress: { rate: 10_000_000, burst: 100_000, dropped: 4 },
    egress: { rate: 20_000_000, burst: 100_000, dropped: 5 },
  },
  services: { affinityHeld: 1, affinityCapacity: 32, noSocketState: 0, socketReplaced: 0, affinityReplaced: 0 },
  policy: {
    ingress: true,
    egress: false,
    pending: false,
    incomplete: false,
    allowed: { ingress: 9, egress: 0 },
    denied: { ingress: 8, egress: 0 },
  },
});

const NAMES = new Map([["fedcba9876543210fedc/eth0", { namespace: "shop", name: "cart-7d9f", ifname: "eth0" }]]);
const rows = (): EndpointView[] =>
  withPodNames([plain(), busy()], NAMES as Map<string, { namespace: string; name: string }>);

/** The table's header cells (columns are two spaces apart; a header has one space at most). */
const headers = (table: string) => (table.split("\n")[0] ?? "").split(/ {2,}/);

describe("endpoints' table", () => {
  it("shows by default only the columns read at a glance, the same for every row", () => {
    const table = formatEndpoints(rows());
    expect(headers(table)).toEqual(NARROW);
    expect(table.split("\n").slice(1)).toEqual([
      "0123456789ab    eth0    netkit    10.244.1.5,fd00::5  10          11     15       -",
      "shop/cart-7d9f  eth0    netkit    10.244.1.6          10          11     15       in denied 8",
    ]);
    // A plain pod's row is as wide as a busy one's: no column comes and goes with the rows.
    expect(headers(formatEndpoints([plain()]))).toEqual(NARROW);
  });

  it("shows every column with -o wide", () => {
    const table = formatEndpoints(rows(), true);
    expect(headers(table)).toEqual(WIDE);
    const busyRow = table.split("\n")[2] ?? "";
    for (const cell of ["shop/cart-7d9f", "fedcba987654", "nkfedcba98", "spoofed:7,policy:8", "3/1024"]) {
      expect(busyRow).toContain(cell);
    }
    expect(busyRow).toContain("in 10M police out 20M edt");
    expect(busyRow).toContain("1/32");
    expect(busyRow).toMatch(/in denied 8$/);
  });

  it("names the pod where ADD recorded it, else shows its container", () => {
    const [a, b] = rows();
    expect(a?.pod).toBeUndefined();
    expect(b?.pod).toBe("shop/cart-7d9f");
    expect(
      withPodNames([plain()], new Map([["0123456789abcdef0123/eth0", { namespace: undefined, name: "x" }]])),
    ).toEqual([plain()]);
  });
});

describe("endpoints' -o", () => {
  it("json: the rows as they are, numbers and all, that parse back to the same", () => {
    const out = render("json", rows(), (wide) => formatEndpoints(rows(), wide));
    const parsed = JSON.parse(out) as EndpointView[];
    expect(parsed).toEqual(rows());
    expect(parsed[1]?.pod).toBe("shop/cart-7d9f");
    expect(parsed[0]?.counters?.redirectedFib).toBe(2);
    // The namespace cookie, a u64, stays a string: JSON's numbers would round it.
    expect(parsed[1]?.sockRecord?.netnsCookie).toBe("18446744073709551615");
  });

  it("table and wide: the table", () => {
    expect(render("table", rows(), (wide) => formatEndpoints(rows(), wide))).toBe(formatEndpoints(rows()));
    expect(render("wide", rows(), (wide) => formatEndpoints(rows(), wide))).toBe(formatEndpoints(rows(), true));
  });
});

describe("a format a command does not print", () => {
  afterEach(() => vi.restoreAllMocks());

  it.each([
    [["endpoints", "-o", "yaml"], "netkit-cni endpoints: -o must be table, wide or json, not yaml"],
    [["status", "--output", "jsonl"], "netkit-cni status: --output must be table, wide or json, not jsonl"],
    [["monitor", "-o", "name"], "netkit-cni monitor: -o must be table, wide, json or jsonl, not name"],
  ])("%j is a usage error: exit status 2, naming those it does", async (argv, message) => {
    const stderr: string[] = [];
    vi.spyOn(process.stderr, "write").mockImplementation((text) => {
      stderr.push(String(text));
      return true;
    });
    const stdout = vi.spyOn(process.stdout, "write").mockImplementation(() => true);
    expect(await runCli(argv)).toBe(2);
    expect(stderr.join("")).toBe(`${message}\n`);
    expect(stdout).not.toHaveBeenCalled();
  });
});
