/** The Service traffic section's tables (bench/lib/services-report.ts), from a made-up run. */
import { describe, expect, it } from "vitest";
import type { ServicesRun } from "../../bench/lib/services";
import { servicesAppsTable, servicesCrossingsTable, servicesRatioTable } from "../../bench/lib/services-report";

const hops = { wire: 0, loopback: 0, intoPod: 0, outOfPod: 0 };
const per = (total: number) => ({ packets: 1000, total, hops });
const rates = (rr: number[], crr: number[]) => ({ TCP_RR: rr, TCP_CRR: crr });

const run: ServicesRun = {
  rounds: 3,
  seconds: 5,
  crossings: [
    { mode: "translated", placement: "across", rrRequest: per(2), rrResponse: per(2) },
    { mode: "kube-proxy", placement: "across", rrRequest: per(3), rrResponse: per(3) },
    { mode: "pod", placement: "across", rrRequest: per(2), rrResponse: per(2) },
  ],
  samples: {
    translated: { across: rates([110, 120, 130], [50, 50, 50]), same: rates([1, 1, 1], [1, 1, 1]) },
    "kube-proxy": { across: rates([100, 100, 100], [40, 50, 25]), same: rates([1, 1, 1], [1, 1, 1]) },
    pod: { across: rates([110, 120, 130], [50, 50, 50]), same: rates([1, 1, 1], [1, 1, 1]) },
  },
  apps: {
    translated: { nginx: [1100, 1200], redis: [500, 500] },
    "kube-proxy": { nginx: [1000, 1000], redis: [400, 500] },
    pod: { nginx: [1100, 1200], redis: [500, 500] },
  },
  errors: [],
};

describe("the Service traffic section", () => {
  it("shows crossings per packet by way and placement", () => {
    const t = servicesCrossingsTable(run);
    expect(t).toContain("| ClusterIP, translated at connect (`serviceTranslation`) | 2.00 / 2.00 | n/a |");
    expect(t).toContain("| ClusterIP, kube-proxy's DNAT in the node (nftables) | 3.00 / 3.00 | n/a |");
  });

  it("gives medians of per-round ratios with their spread", () => {
    const t = servicesRatioTable(run);
    expect(t).toContain("| TCP_RR | across nodes | 120 | 100 | 120 | 1.20× (1.10–1.30) | 1.00× (1.00–1.00) |");
    expect(t).toContain("| TCP_CRR | across nodes | 50 | 40 | 50 | 1.25× (1.00–2.00) | 1.00× (1.00–1.00) |");
  });

  it("gives the applications' rates and ratios across nodes", () => {
    const t = servicesAppsTable(run);
    expect(t).toContain("| nginx, wrk (small page) | 1,150 | 1,000 | 1,150 | 1.15× (1.10–1.20) | 1.00× (1.00–1.00) |");
    expect(t).toContain("| Redis, redis-benchmark GET | 500 | 450 | 500 | 1.13× (1.00–1.25) | 1.00× (1.00–1.00) |");
  });
});
