/**
 * The rate-limit bench's reading of its tools and its part of the report: a failed
 * iperf3 or netperf run must not become a figure, a pod whose limits are not what its ADD
 * asked for must stop the bench, and the tables must come from the newest run that
 * measured them, named, with the guest's apart.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { BandwidthRun, LatencySamples, RateSamples } from "../../bench/lib/bandwidth";
import { capabilityOf, egressModeOf } from "../../bench/lib/bandwidth-pods";
import { bandwidthSection, latencyTable, rateTable } from "../../bench/lib/bandwidth-report";
import { parseIperf3 } from "../../bench/lib/iperf3";
import { renderReport } from "../../bench/lib/report";
import type { BenchResult } from "../../bench/lib/result";
import { parseNetperfCsv } from "../support/netperf";

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
  it("asks for the rate both ways with 0.3 s of burst, in bits", () => {
    expect(capabilityOf(10)).toEqual({
      ingressRate: 10_000_000,
      ingressBurst: 3_000_000,
      egressRate: 10_000_000,
      egressBurst: 3_000_000,
    });
  });

  const rows = [
    { hostDevice: "nkh0a1", limits: undefined },
    {
      hostDevice: "nkh0a2",
      limits: {
        mode: "edt",
        pacedIfindex: 2,
        ingress: { rate: 1e7, burst: 3e6, dropped: 0 },
        egress: { rate: 1e7, burst: 3e6, dropped: 0 },
      },
    },
  ];

  it("reads how the pod's egress is enforced from netkit-cni endpoints", () => {
    expect(egressModeOf(rows, "nkh0a2", 1e7)).toEqual({ mode: "edt" });
  });

  it("refuses a pod that is missing, unlimited or limited to another rate", () => {
    expect(egressModeOf(rows, "nkh0zz", 1e7)).toEqual({ error: "no row for nkh0zz in netkit-cni endpoints" });
    expect(egressModeOf(rows, "nkh0a1", 1e7)).toEqual({ error: "nkh0a1 has no rate limits" });
    expect(egressModeOf(rows, "nkh0a2", 1e8)).toHaveProperty("error", expect.stringMatching(/not 100000000 bit\/s/));
    expect(egressModeOf({ not: "rows" }, "nkh0a2", 1e7)).toHaveProperty("error");
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
const latency = (loaded: number[], unloaded: number[], bulk: number[]) => ({
  loaded: { ...rr(loaded, [500, 500, 500]), bulk },
  unloaded: rr(unloaded, [4000, 4000, 4000]),
});

const HOST_RUN: BandwidthRun = {
  rounds: 3,
  seconds: 5,
  burstSeconds: 0.3,
  limits: [10, 1000],
  latencyLimits: [10],
  variants: ["ours-veth", "reference"],
  modes: { "ours-veth": { "10": "police", "1000": "edt" } },
  rate: {
    "ours-veth": { "10": rate([9.1, 9.3, 9.2], [9.5, 9.4, 9.6]), "1000": rate([912, 905, 920], [950, 948, 951]) },
    reference: {
      "10": rate([9.6, 9.5, 9.7], [9.0, 9.2, 9.1], [0, 0, 0]),
      "1000": rate([800, 810, 790], [700, 720, 710]),
    },
  },
  latency: {
    "ours-veth": { "10": latency([1000, 1200, 1100], [100, 110, 120], [9.1, 9.2, 9.0]) },
    reference: { "10": latency([2000, 2000, 2000], [100, 100, 100], [9.5, 9.5, 9.5]) },
  },
  referencePackage: "1.1.1+ds1-3+b5",
  errors: [],
};

const GUEST_RUN: BandwidthRun = {
  ...HOST_RUN,
  rounds: 1,
  seconds: 3,
  variants: ["ours-netkit", "ours-veth"],
  modes: { "ours-netkit": { "10": "edt", "1000": "edt" }, "ours-veth": { "10": "edt", "1000": "edt" } },
  rate: { "ours-netkit": { "10": rate([9.4], [9.3], [0]) }, "ours-veth": { "10": rate([9.2], [9.1], [1]) } },
  latency: {
    "ours-netkit": { "10": latency([900], [300], [9.4]) },
    "ours-veth": { "10": latency([950], [320], [9.3]) },
  },
  referencePackage: undefined,
  errors: ["ours-veth 1000 Mbit/s: iperf3 x → y: unable to connect to server: Connection refused"],
};

function result(kind: "host" | "vm", startedAt: string, bandwidth?: BandwidthRun): BenchResult {
  return {
    schema: 1,
    kind,
    startedAt,
    finishedAt: startedAt,
    durationS: 60,
    machine: {
      kernel: kind === "host" ? "6.18.44-fc" : "6.12.95",
      kernelVersion: "#1 SMP",
      os: "Debian GNU/Linux 12 (bookworm)",
      cpu: "Intel(R) Xeon(R) Processor",
      cpus: 2,
      memGiB: 23.5,
      node: "v20.20.2",
      netperf: "2.7.0",
      iperf3: "3.12",
      plugin: { sha256: "0123456789abcdef", builtAt: startedAt, commit: "abc1234", srcChanged: false },
    },
    settings: {
      rounds: 0,
      seconds: 0,
      pings: 0,
      transactions: 0,
      cycles: 0,
      storm: 0,
      stormRepeats: 0,
      concurrency: 0,
      skipped: [],
      bwRounds: bandwidth?.rounds,
      bwSeconds: bandwidth?.seconds,
    },
    ...(bandwidth ? { bandwidth } : {}),
  };
}

describe("rate-limit bench: report tables", () => {
  it("gives each variant and limit its medians, spread and share of the limit, with the egress enforcement", () => {
    const table = rateTable(HOST_RUN).split("\n");
    expect(table).toContain(
      "| netkit-cni veth | 10 Mbit/s | policed | 9.2 [9.1–9.3] | 0.92 | 9.5 [9.4–9.6] | 0.95 | 3 / 0 |",
    );
    expect(table).toContain(
      "| ptp + bandwidth plugin | 10 Mbit/s | shaped (qdisc on an ifb) | 9.6 [9.5–9.7] | 0.96 | 9.1 [9.0–9.2] | 0.91 | 0 / 0 |",
    );
    expect(table).toContain(
      "| netkit-cni veth | 1000 Mbit/s | paced (EDT) | 912 [905–920] | 0.91 | 950 [948–951] | 0.95 | 3 / 0 |",
    );
  });

  it("puts ours ÷ the reference of the same rounds under the latencies", () => {
    const table = latencyTable(HOST_RUN, true).split("\n");
    expect(table).toContain(
      "| netkit-cni veth | 10 Mbit/s | policed | 1,100 | 2,200 | 4,400 | 110 | 220 | 440 | 500 | 4,000 | 9.1 |",
    );
    const ratio = table.find((l) => l.startsWith("| netkit-cni veth ÷ ptp + bandwidth plugin | 10 Mbit/s |"));
    // Per round 1000/2000, 1200/2000, 1100/2000: the loaded p50 ratio is 0.55 (0.50–0.60).
    expect(ratio?.split(" | ")[3]).toBe("**0.55×** (0.50–0.60)");
    expect(ratio?.split(" | ")[6]).toBe("**1.10×** (1.00–1.20)");
  });

  it("keeps the guest's run apart, without ratios, and says it is not comparable in time", () => {
    const text = bandwidthSection(undefined, {
      name: "`results/g.json`",
      r: result("vm", "2026-12-02T00:00:00Z", GUEST_RUN),
    });
    expect(text).toContain("_no run on this kernel measured the rate limits yet._");
    expect(text).toContain("In the UML guest, from `results/g.json`");
    expect(text).toContain("Not comparable in time");
    expect(text).toContain("| netkit-cni netkit | 10 Mbit/s | paced (EDT) | 9.4 [9.4–9.4] | 0.94 |");
    expect(text).not.toContain("÷ ptp");
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
    write("2026-12-02T010000Z-6.12.95.json", result("vm", "2026-12-02T01:00:00Z", GUEST_RUN));
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
