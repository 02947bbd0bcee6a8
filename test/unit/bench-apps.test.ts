/**
 * The applications bench's reading of its tools' reports: a run that failed or completed
 * nothing must not become a figure, and the percentiles must come out in milliseconds.
 */
import { describe, expect, it } from "vitest";
import { parseRedisCsv, parseWrk } from "../../bench/lib/apps/clients";
import type { AppsRun } from "../../bench/lib/apps/index";
import { againstBridge } from "../../bench/lib/apps/report";

const WRK = `Running 2s test @ http://10.221.2.2:8080/small.html
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   151.21us  402.10us  10.02ms   98.12%
    Req/Sec    60.12k     2.01k   64.90k    80.00%
  Latency Distribution
     50%  110.00us
     75%  130.00us
     90%  160.00us
     99%    4.81ms
  120240 requests in 2.00s, 92.48MB read
Requests/sec:  60120.00
Transfer/sec:     46.24MB
`;

const REDIS = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","82644.62","0.060","0.016","0.055","0.087","0.119","0.855"
"GET","92592.59","0.052","0.016","0.051","0.079","0.103","0.623"
`;

describe("applications bench: tool reports", () => {
  it("reads wrk's rate, count and percentiles (µs and ms to ms)", () => {
    expect(parseWrk("wrk", 0, WRK)).toEqual({ rate: 60120, p50: 0.11, p99: 4.81, ops: 120240 });
  });

  it("refuses a wrk run with socket errors or non-2xx answers", () => {
    const bad = WRK.replace("Requests/sec", "  Socket errors: connect 8, read 0, write 0, timeout 0\nRequests/sec");
    expect(parseWrk("wrk", 0, bad).error).toMatch(/^wrk/);
    expect(parseWrk("wrk", 0, `${WRK}  Non-2xx or 3xx responses: 5\n`).error).toBeDefined();
  });

  it("reads one test's row of redis-benchmark --csv", () => {
    expect(parseRedisCsv("r", "GET", 1000, 0, REDIS)).toEqual({ rate: 92592.59, p50: 0.051, p99: 0.103, ops: 1000 });
    expect(parseRedisCsv("r", "SET", 1000, 1, REDIS).error).toBeDefined();
    expect(parseRedisCsv("r", "INCR", 1000, 0, REDIS).ops).toBe(0);
  });
});

describe("applications bench: veth against bridge", () => {
  const s = (rate: number[]) => ({ rate, p50: [], p99: [], cpuUsPerOp: rate.map(() => 10) });
  const run = (veth: number[], bridge: number[]): AppsRun => ({
    rounds: veth.length,
    seconds: 1,
    workloads: ["memcached"],
    order: ["bridge", "veth"],
    placements: ["same"],
    samples: { veth: { same: { memcached: s(veth) } }, bridge: { same: { memcached: s(bridge) } } },
    completed: {},
    bypass: [],
    errors: [],
  });

  it("wins only when above bridge in every round, loses at or below it by the median", () => {
    expect(againstBridge(run([11, 12, 13], [10, 10, 10]))[0]?.verdict).toBe("wins");
    expect(againstBridge(run([9, 12, 13], [10, 10, 10]))[0]?.verdict).toBe("mixed");
    expect(againstBridge(run([9, 10, 13], [10, 10, 10]))[0]?.verdict).toBe("loses");
  });
});
