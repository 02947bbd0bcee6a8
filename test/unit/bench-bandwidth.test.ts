/**
 * The rate-limit bench's reading of its tools and its part of the report: a failed
 * iperf3 or netperf run must not become a figure, a pod whose limits are not what its ADD
 * asked for must stop the bench, the variants' figures must stand side by side per limit,
 * burst and direction, older results files must still render, and the tables must come
 * from the newest run that measured them, named, with the guest's apart.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { BandwidthRun, LatencySamples, LatencySet, RateSamples } from "../../bench/lib/bandwidth";
import { bandwidthRunOf, type OlderRun } from "../../bench/lib/bandwidth-older";
import { BURSTS_MS, capabilityOf, modesOf, type PodModes, shapeKey, shapesOf } from "../../bench/lib/bandwidth-pods";
import {
  bandwidthSection,
  enforcement,
  enforcementTable,
  latencyTable,
  rateShareTable,
  rateTable,
} from "../../bench/lib/bandwidth-report";
import { parseIperf3 } from "../../bench/lib/iperf3";
import { renderReport } from "../../bench/lib/report";
import type { BenchResult } from "../../bench/lib/result";
import { parseNetperfCsv } from "../support/netperf";
import { benchResult as result } from "./fixtures/bench-result";

// iperf3 3.12 -J, shortened: a1 → b1 at a 10 Mbit/s limit.
const EGRESS = `{
	"start":	{
		"connected":	[{ "socket": 5, "local_host": "10.221.1.3", "local_port": 46172, "remote_host": "10.221.2.2", "remote_port": 5201 }],
		"version":	"iperf 3.12",
		"test_start":	{ "protocol": "TCP", "num_streams": 1, "blksize": 131072, "omit": 0, "duration": 5, "reverse": 0 }
	},
	"intervals":	[],
	"end":	{
		"streams":	[],
		"sum_sent":	{ "start": 0, "end": 5.000118, "seconds": 5.000118, "bytes": 5898240, "bits_per_second": 9436937.3, "retransmits": 37, "sender": true },
		"sum_received":	{ "start": 0, "end": 5.031985, "seconds": 5.031985, "bytes": 5767168, "bits_per_second": 9168670.1, "sender": true },
		"cpu_utilization_percent":	{ "host_total": 1.2, "remote_total": 0.3 },
		"sender_tcp_congestion":	"cubic",
		"receiver_tcp_congestion":	"cubic"
	}
}`;

// The same with -R: b1 sends, the client is the receiver; sum_sent is the server's.
const INGRESS = `{
	"start":	{ "version": "iperf 3.12", "test_start": { "protocol": "TCP", "num_streams": 1, "duration": 5, "reverse": 1 } },
	"intervals":	[],
	"end":	{
		"sum_sent":	{ "start": 0, "end": 5.001019, "seconds": 5.001019, "bytes": 61341696, "bits_per_second": 98127315.6, "retransmits": 0, "sender": false },
		"sum_received":	{ "start": 0, "end": 5.00012, "seconds": 5.00012, "bytes": 60555264, "bits_per_second": 96885189.4, "sender": false }
	}
}`;

// What iperf3 3.12 prints, exit status 0, when the server is not there.
const REFUSED = `{
	"start":	{ "connected": [], "version": "iperf 3.12", "system_info": "Linux vm 6.18.44 #1 SMP x86_64" },
	"intervals":	[],
	"end":	{
	},
	"error":	"unable to connect to server: Connection refused"
}`;

describe("rate-limit bench: iperf3 reports", () => {
  it("reads the receiver's rate in Mbit/s and the sender's retransmissions", () => {
    const r = parseIperf3(EGRESS, "egress");
    expect(r.error).toBeUndefined();
    expect(r.mbits).toBeCloseTo(9.1686701, 6);
    expect(r.retransmits).toBe(37);
  });

  it("reads the client's own count in reverse mode", () => {
    const r = parseIperf3(INGRESS, "ingress");
    expect(r.mbits).toBeCloseTo(96.8851894, 6);
    expect(r.retransmits).toBe(0);
  });

  it("turns a report's error into an error, not a figure", () => {
    const r = parseIperf3(REFUSED, "iperf3 a → b");
    expect(r.error).toBe("iperf3 a → b: unable to connect to server: Connection refused");
    expect(r.mbits).toBeNaN();
  });

  it("refuses output that is no report, or a report without sum_received", () => {
    expect(parseIperf3("", "x", "iperf3: error - unable to connect\n").error).toBe(
      "x: iperf3: error - unable to connect",
    );
    expect(parseIperf3("", "x").error).toBe("x: no JSON report");
    expect(parseIperf3(`{"start": {}, "intervals": [], "end": {}}`, "x").error).toMatch(/sum_received/);
  });
});

describe("rate-limit bench: netperf output selectors", () => {
  it("reads the values of -o on the last line, in order", () => {
    expect(parseNetperfCsv("76,106,2400,8545.31\n", 4)).toEqual([76, 106, 2400, 8545.31]);
    const withBanner =
      "MIGRATED TCP REQUEST/RESPONSE TEST from 0.0.0.0 () port 0 AF_INET to 10.221.2.2 () port 0 AF_INET\n" +
      "50th Percentile Latency Microseconds,90th Percentile Latency Microseconds,99th Percentile Latency Microseconds,Throughput\n" +
      "18,26,39,47460.45\n";
    expect(parseNetperfCsv(withBanner, 4)).toEqual([18, 26, 39, 47460.45]);
  });

  it("refuses a line with too few values or one that is not a number", () => {
    expect(parseNetperfCsv("76,106,8545.31", 4)).toBeUndefined();
    expect(parseNetperfCsv("76,,2400,8545.31", 4)).toBeUndefined();
    expect(parseNetperfCsv("establish control: are you sure there is a netserver listening", 1)).toBeUndefined();
  });
});

describe("rate-limit bench: the pods' limits", () => {
  it("asks for the rate both ways with the burst's ms at that rate, in bits", () => {
    expect(capabilityOf(10, 300)).toEqual({
      ingressRate: 10_000_000,
      ingressBurst: 3_000_000,
      egressRate: 10_000_000,
      egressBurst: 3_000_000,
    });
    expect(capabilityOf(100, 50)).toMatchObject({ ingressBurst: 5_000_000, egressBurst: 5_000_000 });
  });

  it("makes a pod for every limit with every burst, named by both", () => {
    const shapes = shapesOf([10, 100], BURSTS_MS);
    expect(shapes.map(shapeKey)).toEqual(["10-300ms", "10-50ms", "100-300ms", "100-50ms"]);
  });

  const limited = (mode: string | undefined, ingressMode: string | undefined, burst = 3e6) => ({
    mode,
    ingressMode,
    pacedIfindex: 0,
    ingress: { rate: 1e7, burst, dropped: 0 },
    egress: { rate: 1e7, burst, dropped: 0 },
  });
  const rows = [
    { hostDevice: "nkh0a1", limits: undefined },
    { hostDevice: "nkh0a2", limits: limited("police", "qdisc") },
    { hostDevice: "nkh0a3", limits: limited("edt", undefined) },
    { hostDevice: "nkh0a4", limits: limited("edt", "edt", 5e5) },
  ];

  it("reads how each direction of the pod is enforced from netkit-cni endpoints", () => {
    expect(modesOf(rows, "nkh0a2", capabilityOf(10, 300))).toEqual({ egress: "police", ingress: "qdisc" });
    expect(modesOf(rows, "nkh0a4", capabilityOf(10, 50))).toEqual({ egress: "edt", ingress: "edt" });
  });

  it("refuses a pod that is missing, unlimited, limited otherwise or without a mode", () => {
    expect(modesOf(rows, "nkh0zz", capabilityOf(10, 300))).toEqual({
      error: "no row for nkh0zz in netkit-cni endpoints",
    });
    expect(modesOf(rows, "nkh0a1", capabilityOf(10, 300))).toEqual({ error: "nkh0a1 has no rate limits" });
    expect(modesOf(rows, "nkh0a2", capabilityOf(100, 300))).toHaveProperty(
      "error",
      expect.stringMatching(/not 100000000\/30000000 in/),
    );
    // The right rate with another burst: the figures would be labelled with the wrong one.
    expect(modesOf(rows, "nkh0a4", capabilityOf(10, 300))).toHaveProperty(
      "error",
      "nkh0a4 is limited to 10000000/500000 in, 10000000/500000 out (rate/burst, bits), not 10000000/3000000 in, 10000000/3000000 out",
    );
    expect(modesOf(rows, "nkh0a3", capabilityOf(10, 300))).toEqual({ error: "nkh0a3: no ingress enforcement mode" });
    expect(modesOf({ not: "rows" }, "nkh0a2", capabilityOf(10, 300))).toHaveProperty("error");
  });
});

// --- the report ---------------------------------------------------------------------------

const rate = (egress: number[], ingress: number[], retransmits = [3, 3, 3]): RateSamples => ({
  egress,
  ingress,
  egressRetransmits: retransmits,
  ingressRetransmits: egress.map(() => 0),
});
/** TCP_RR samples whose p90 and p99 are twice and four times the p50. */
const rr = (p50: number[], tps: number[]): LatencySamples => ({
  p50,
  p90: p50.map((v) => 2 * v),
  p99: p50.map((v) => 4 * v),
  tps,
});
/** TCP_RR alone, beside a bulk flow a1 → b1 and beside one b1 → a1 (p50s; p99 = 4 × p50), and each bulk flow's rate. */
const latency = (
  unloaded: number[],
  egress: number[],
  ingress: number[],
  bulk: { egress: number[]; ingress: number[] },
): LatencySet => ({
  unloaded: rr(unloaded, [4000, 4000, 4000]),
  loaded: {
    egress: { ...rr(egress, [500, 500, 500]), bulk: bulk.egress },
    ingress: { ...rr(ingress, [600, 600, 600]), bulk: bulk.ingress },
  },
});
const modes = (egress: string, ingress: string): PodModes => ({ egress, ingress });

const HOST_RUN: BandwidthRun = {
  rounds: 3,
  seconds: 5,
  burstsMs: [300, 50],
  limits: [10, 1000],
  latencyLimits: [10],
  variants: ["ours-veth", "reference"],
  modes: {
    "ours-veth": {
      "10-300ms": modes("police", "qdisc"),
      "10-50ms": modes("police", "qdisc"),
      "1000-300ms": modes("police", "qdisc"),
      "1000-50ms": modes("police", "qdisc"),
    },
  },
  rate: {
    "ours-veth": {
      "10-300ms": rate([9.1, 9.3, 9.2], [9.5, 9.4, 9.6]),
      "10-50ms": rate([2.1, 2.4, 2.3], [9.6, 9.5, 9.7]),
      "1000-300ms": rate([912, 905, 920], [950, 948, 951]),
      "1000-50ms": rate([250, 260, 240], [940, 930, 950]),
    },
    reference: {
      "10-300ms": rate([9.6, 9.5, 9.7], [9.0, 9.2, 9.1], [0, 0, 0]),
      "10-50ms": rate([9.4, 9.5, 9.6], [9.3, 9.3, 9.3], [0, 0, 0]),
      "1000-300ms": rate([800, 810, 790], [700, 720, 710]),
      "1000-50ms": rate([780, 770, 790], [690, 700, 710]),
    },
  },
  latency: {
    "ours-veth": {
      "10-300ms": latency([100, 110, 120], [1000, 1200, 1100], [5000, 5000, 5000], {
        egress: [9.1, 9.2, 9.0],
        ingress: [9.6, 9.6, 9.6],
      }),
      "10-50ms": latency([100, 100, 100], [300, 300, 300], [2500, 2500, 2500], {
        egress: [2.2, 2.3, 2.4],
        ingress: [9.5, 9.5, 9.5],
      }),
    },
    reference: {
      "10-300ms": latency([100, 100, 100], [2000, 2000, 2000], [4000, 5000, 5000], {
        egress: [9.5, 9.5, 9.5],
        ingress: [9.4, 9.4, 9.4],
      }),
      "10-50ms": latency([100, 100, 100], [1000, 1000, 1000], [1000, 1000, 1000], {
        egress: [9.5, 9.5, 9.5],
        ingress: [9.4, 9.4, 9.4],
      }),
    },
  },
  referencePackage: "1.1.1+ds1-3+b5",
  errors: [],
};

/** A guest run as written before two bursts and both loaded directions: one burst, records by limit. */
const OLDER_GUEST_RUN: OlderRun = {
  rounds: 1,
  seconds: 3,
  burstSeconds: 0.3,
  limits: [10, 1000],
  latencyLimits: [10],
  variants: ["ours-netkit", "ours-veth"],
  modes: { "ours-netkit": { "10": "edt", "1000": "edt" }, "ours-veth": { "10": "edt", "1000": "police" } },
  rate: { "ours-netkit": { "10": rate([9.4], [9.3], [0]) }, "ours-veth": { "10": rate([9.2], [9.1], [1]) } },
  latency: {
    "ours-netkit": { "10": { unloaded: rr([300], [4000]), loaded: { ...rr([900], [500]), bulk: [9.4] } } },
    "ours-veth": { "10": { unloaded: rr([320], [4000]), loaded: { ...rr([950], [500]), bulk: [9.3] } } },
  },
  errors: ["ours-veth 1000 Mbit/s: iperf3 x → y: unable to connect to server: Connection refused"],
};

/** A table's row whose first cells are `first`, split into cells. */
function row(table: string, ...first: string[]): string[] | undefined {
  const prefix = `| ${first.join(" | ")} |`;
  const line = table.split("\n").find((l) => l.startsWith(prefix));
  return line
    ?.slice(2, -2)
    .split(" | ")
    .map((c) => c.trim());
}

describe("rate-limit bench: report tables", () => {
  it("says how each variant enforced each direction, our modes as endpoints reported them", () => {
    const table = enforcementTable(HOST_RUN);
    expect(row(table, "netkit-cni veth")).toEqual(["netkit-cni veth", "policed", "shaped (tbf on the host device)"]);
    expect(row(table, "ptp + bandwidth plugin")).toEqual([
      "ptp + bandwidth plugin",
      "shaped (qdisc on an ifb)",
      "shaped (qdisc on the host veth)",
    ]);
  });

  it("names the pods a mode held for when it was not the same for all", () => {
    const mixed: BandwidthRun = {
      ...HOST_RUN,
      modes: { "ours-veth": { ...HOST_RUN.modes["ours-veth"], "1000-50ms": modes("edt", "edt") } },
    };
    expect(enforcement(mixed, "ours-veth", "egress")).toBe(
      "policed (10 Mbit/s 300 ms, 10 Mbit/s 50 ms, 1000 Mbit/s 300 ms); paced (EDT, fq on the uplink) (1000 Mbit/s 50 ms)",
    );
    expect(enforcement(mixed, "ours-veth", "ingress")).toMatch(/^shaped \(tbf on the host device\) \(10 Mbit/);
  });

  it("puts the variants' shares of the limit side by side, per burst and direction", () => {
    const table = rateShareTable(HOST_RUN);
    expect(table.split("\n")[0]).toBe(
      "| limit | burst | a1 → b1 (egress) ÷ limit: netkit-cni veth | a1 → b1 (egress) ÷ limit: ptp + bandwidth plugin | b1 → a1 (ingress) ÷ limit: netkit-cni veth | b1 → a1 (ingress) ÷ limit: ptp + bandwidth plugin |",
    );
    expect(row(table, "10 Mbit/s", "300 ms")).toEqual(["10 Mbit/s", "300 ms", "0.92", "0.96", "0.95", "0.91"]);
    expect(row(table, "10 Mbit/s", "50 ms")).toEqual(["10 Mbit/s", "50 ms", "0.23", "0.95", "0.96", "0.93"]);
    expect(row(table, "1000 Mbit/s", "50 ms")).toEqual(["1000 Mbit/s", "50 ms", "0.25", "0.78", "0.94", "0.70"]);
  });

  it("keeps each variant's rates as measured, with their spread and retransmissions", () => {
    const table = rateTable(HOST_RUN);
    expect(row(table, "netkit-cni veth", "10 Mbit/s", "50 ms")).toEqual([
      "netkit-cni veth",
      "10 Mbit/s",
      "50 ms",
      "2.3 [2.1–2.4]",
      "9.6 [9.5–9.7]",
      "3 / 0",
    ]);
    expect(row(table, "ptp + bandwidth plugin", "1000 Mbit/s", "300 ms")?.[3]).toBe("800 [790–810]");
  });

  it("gives the p99 alone and beside a bulk flow each way, ours ÷ the reference of the same rounds, and the bulk's share", () => {
    const table = latencyTable(HOST_RUN, true);
    expect(table.split("\n")[0]).toBe(
      "| limit | burst | bulk flow | TCP_RR p99 µs: netkit-cni veth | TCP_RR p99 µs: ptp + bandwidth plugin | p99 ÷ reference: netkit-cni veth | bulk ÷ limit: netkit-cni veth | bulk ÷ limit: ptp + bandwidth plugin |",
    );
    expect(row(table, "10 Mbit/s", "300 ms", "none")).toEqual([
      "10 Mbit/s",
      "300 ms",
      "none",
      "440",
      "400",
      "**1.10×** (1.00–1.20)",
      "–",
      "–",
    ]);
    // Per round 4000/8000, 4800/8000, 4400/8000: 0.55 (0.50–0.60).
    expect(row(table, "10 Mbit/s", "300 ms", "a1 → b1 (egress)")).toEqual([
      "10 Mbit/s",
      "300 ms",
      "a1 → b1 (egress)",
      "4,400",
      "8,000",
      "**0.55×** (0.50–0.60)",
      "0.91",
      "0.95",
    ]);
    // Per round 20000/16000, 20000/20000, 20000/20000.
    expect(row(table, "10 Mbit/s", "300 ms", "b1 → a1 (ingress)")?.slice(3)).toEqual([
      "20,000",
      "20,000",
      "**1.00×** (1.00–1.25)",
      "0.96",
      "0.94",
    ]);
    expect(row(table, "10 Mbit/s", "50 ms", "b1 → a1 (ingress)")?.slice(3, 6)).toEqual([
      "10,000",
      "4,000",
      "**2.50×** (2.50–2.50)",
    ]);
    expect(table.split("\n")).toHaveLength(2 + 2 * 3);
  });

  it("leaves the ratio column out without a reference", () => {
    const table = latencyTable({ ...HOST_RUN, variants: ["ours-veth"] }, true);
    expect(table).not.toContain("÷ reference");
    expect(row(table, "10 Mbit/s", "50 ms", "a1 → b1 (egress)")).toEqual([
      "10 Mbit/s",
      "50 ms",
      "a1 → b1 (egress)",
      "1,200",
      "0.23",
    ]);
  });

  it("renders this kernel's run with its bursts and every table", () => {
    const text = bandwidthSection({ name: "`results/h.json`", r: result("host", "2026-12-02T00:00:00Z", HOST_RUN) });
    expect(text).toContain(
      "3 interleaved rounds × 5 s per test, each limit both ways with bursts of 300 and 50 ms at its rate; reference plugins: Debian containernetworking-plugins 1.1.1+ds1-3+b5.",
    );
    for (const table of [enforcementTable, rateShareTable, rateTable]) expect(text).toContain(table(HOST_RUN));
    expect(text).toContain(latencyTable(HOST_RUN, true));
  });

  it("reads an older run as one burst with its egress modes, ingress policed and no ingress load", () => {
    const b = bandwidthRunOf(OLDER_GUEST_RUN);
    expect(b.burstsMs).toEqual([300]);
    expect(b.modes["ours-veth"]).toEqual({
      "10-300ms": { egress: "edt", ingress: "police" },
      "1000-300ms": { egress: "police", ingress: "police" },
    });
    expect(b.rate["ours-netkit"]?.["10-300ms"]?.egress).toEqual([9.4]);
    expect(b.latency["ours-veth"]?.["10-300ms"]?.loaded.egress.bulk).toEqual([9.3]);
    expect(b.latency["ours-veth"]?.["10-300ms"]?.loaded.ingress.p99).toEqual([]);
    expect(bandwidthRunOf(HOST_RUN)).toBe(HOST_RUN);
  });

  it("keeps the guest's run apart, without ratios, and says it is not comparable in time", () => {
    const text = bandwidthSection(undefined, {
      name: "`results/g.json`",
      r: result("vm", "2026-12-02T00:00:00Z", OLDER_GUEST_RUN),
    });
    expect(text).toContain("_no run on this kernel measured the rate limits yet._");
    expect(text).toContain("In the UML guest, from `results/g.json`");
    expect(text).toContain("1 round × 3 s, a burst of 300 ms at its rate");
    expect(text).toContain("Not comparable in time");
    expect(text).toContain("| netkit-cni netkit | paced (EDT, fq on the uplink) | policed |");
    expect(text).toContain("| 10 Mbit/s | 300 ms | 0.94 | 0.92 | 0.93 | 0.91 |");
    expect(text).toContain("| 10 Mbit/s | 300 ms | a1 → b1 (egress) | 3,600 | 3,800 | 0.94 | 0.93 |");
    expect(text).not.toContain("b1 → a1 (ingress) |");
    expect(text).not.toContain("÷ reference");
    expect(text).toContain("Errors (1): ours-veth 1000 Mbit/s");
  });

  it("says so when no run has the section, and invents nothing", () => {
    const text = bandwidthSection();
    expect(text).toContain("_no run on this kernel measured the rate limits yet._");
    expect(text).toContain("_no guest run measured the rate limits yet");
    expect(text).not.toMatch(/\d Mbit\/s/);
  });
});

describe("rate-limit bench: which runs the README shows", () => {
  let dir = "";
  afterEach(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("takes the newest host run and the newest guest run that measured the section, and names them", () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "nk-bench-bw-"));
    const results = path.join(dir, "results");
    fs.mkdirSync(results);
    const write = (file: string, r: BenchResult) => fs.writeFileSync(path.join(results, file), JSON.stringify(r));
    write("2026-12-01T000000Z-6.18.44-fc.json", result("host", "2026-12-01T00:00:00Z", { ...HOST_RUN, seconds: 4 }));
    write("2026-12-02T000000Z-6.18.44-fc.json", result("host", "2026-12-02T00:00:00Z", HOST_RUN));
    // Newer, but without the section (another --only): the table stays the older run's.
    write("2026-12-03T000000Z-6.18.44-fc.json", result("host", "2026-12-03T00:00:00Z"));
    write("2026-12-02T010000Z-6.12.95.json", result("vm", "2026-12-02T01:00:00Z", OLDER_GUEST_RUN));
    const readme = path.join(dir, "README.md");
    fs.writeFileSync(readme, "# bench\n");
    renderReport(results, readme);
    const text = fs.readFileSync(readme, "utf8");
    expect(text).toContain(
      "From `results/2026-12-02T000000Z-6.18.44-fc.json` (commit abc1234, 2026-12-02): Linux 6.18.44-fc",
    );
    expect(text).toContain("In the UML guest, from `results/2026-12-02T010000Z-6.12.95.json`");
    expect(text).toContain("Debian containernetworking-plugins 1.1.1+ds1-3+b5");
  });
});
