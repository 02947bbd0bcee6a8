/**
 * The workloads: each runs one load client from the client's place against one server set
 * for a fixed time, and returns requests (transactions) per second with latency
 * percentiles in milliseconds. A run that completed nothing, or whose tool reported
 * errors, comes back with `error` set.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { type Place, runClient } from "./exec";
import { FILES, PORTS } from "./servers";

export const WORKLOADS = [
  "nginx-small",
  "nginx-64k",
  "redis-get",
  "redis-set",
  "redis-get-p16",
  "redis-set-p16",
  "pg-select",
  "pg-tpcb",
  "etcd-put",
  "etcd-get",
  "memcached",
] as const;
export type Workload = (typeof WORKLOADS)[number];

export const WORKLOAD_LABELS: Record<Workload, string> = {
  "nginx-small": "nginx, 612 B page (wrk)",
  "nginx-64k": "nginx, 64 KiB file (wrk)",
  "redis-get": "Redis GET",
  "redis-set": "Redis SET",
  "redis-get-p16": "Redis GET, pipeline 16",
  "redis-set-p16": "Redis SET, pipeline 16",
  "pg-select": "PostgreSQL, pgbench select-only",
  "pg-tpcb": "PostgreSQL, pgbench TPC-B-like",
  "etcd-put": "etcd put",
  "etcd-get": "etcd range (get)",
  memcached: "memcached, 90% get / 10% set",
};

/** Connections (wrk, redis-benchmark, loadgen) and pgbench clients: a few, for 2 CPUs. */
export const CONNECTIONS = 8;
const PG_CLIENTS = 4;
const LOADGEN_WORKERS = 4;

export interface Sample {
  rate: number;
  p50: number;
  p99: number;
  /** Operations the run completed (the smoke test's evidence). */
  ops: number;
  error?: string;
}

const failed = (what: string, out: string): Sample => ({
  rate: Number.NaN,
  p50: Number.NaN,
  p99: Number.NaN,
  ops: 0,
  error: `${what}: ${out.trim().split("\n").slice(-3).join(" | ")}`,
});

/** wrk's "50%  1.23ms" lines, in ms. */
function wrkLatency(out: string, q: string): number {
  const m = new RegExp(`^\\s*${q}%\\s+([0-9.]+)(us|ms|s)\\s*$`, "m").exec(out);
  if (!m) return Number.NaN;
  const scale = { us: 1e-3, ms: 1, s: 1e3 }[m[2] as "us" | "ms" | "s"];
  return Number(m[1]) * scale;
}

/** wrk's report (with --latency) as a sample; any error line makes it a failure. */
export function parseWrk(what: string, status: number | null, out: string): Sample {
  const rate = Number(/^Requests\/sec:\s*([0-9.]+)/m.exec(out)?.[1] ?? Number.NaN);
  const ops = Number(/^\s*(\d+) requests in/m.exec(out)?.[1] ?? 0);
  if (status !== 0 || !Number.isFinite(rate) || ops === 0 || /Non-2xx|Socket errors/.test(out)) {
    return failed(what, out);
  }
  return { rate, p50: wrkLatency(out, "50"), p99: wrkLatency(out, "99"), ops };
}

export function wrk(client: Place, ip: string, file: string, seconds: number): Sample {
  const url = `http://${ip}:${PORTS.nginx}/${file}`;
  const r = runClient(client, ["wrk", "-t1", `-c${CONNECTIONS}`, `-d${seconds}s`, "--latency", url], seconds);
  return parseWrk(`wrk ${file}`, r.status, r.out);
}

/**
 * redis-benchmark's SET and GET in one invocation, a fixed number of requests each (it
 * has no time limit), sized so each test lasts about `seconds`: from the previous run's
 * rate on the same client and server (a fixed count would last a fraction of a second on
 * a fast path and be mostly start-up and noise), from a low guess the first time.
 */
const redisRates = new Map<string, number>();

export function redisBench(client: Place, ip: string, seconds: number, pipeline: number): Record<string, Sample> {
  const key = `${client.netns}>${ip}/${pipeline}`;
  const perSecond = redisRates.get(key) ?? (pipeline > 1 ? 150_000 : 25_000);
  const n = Math.max(1000, Math.min(Math.round(perSecond * seconds), 20_000_000));
  const args = ["redis-benchmark", "-h", ip, "-p", String(PORTS.redis), "-c", String(CONNECTIONS), "-n", String(n)];
  const r = runClient(client, [...args, "-P", String(pipeline), "-t", "set,get", "--csv"], 6 * seconds + 10);
  const out = {
    SET: parseRedisCsv(`redis-benchmark SET -P ${pipeline}`, "SET", n, r.status, r.out),
    GET: parseRedisCsv(`redis-benchmark GET -P ${pipeline}`, "GET", n, r.status, r.out),
  };
  const slower = Math.min(out.SET.rate, out.GET.rate);
  if (Number.isFinite(slower) && slower > 0) redisRates.set(key, slower);
  return out;
}

/**
 * One test's row of redis-benchmark --csv: "test","rps","avg_latency_ms","min_latency_ms",
 * "p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms".
 */
export function parseRedisCsv(what: string, test: string, n: number, status: number | null, out: string): Sample {
  const row = new RegExp(`^"${test}","([^"]+)","([^"]+)","([^"]+)","([^"]+)","([^"]+)","([^"]+)"`, "m").exec(out);
  const rate = Number(row?.[1]);
  if (status !== 0 || !row || !Number.isFinite(rate)) return failed(what, out);
  return { rate, p50: Number(row[4]), p99: Number(row[6]), ops: n };
}

/**
 * pgbench for `seconds`, select-only (-S) or the built-in TPC-B-like script, with a
 * per-transaction log (-l) for the percentiles: the summary gives only the mean.
 */
export function pgbench(client: Place, ip: string, seconds: number, selectOnly: boolean): Sample {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkc-pgbench-"));
  try {
    const args = ["pgbench", "-h", ip, "-p", String(PORTS.postgres), "-U", "postgres", "-n", "-l"];
    const cmd = [...args, "-c", String(PG_CLIENTS), "-j", "1", "-T", String(seconds), ...(selectOnly ? ["-S"] : [])];
    const r = runClient(client, [...cmd, "postgres"], seconds, dir);
    const rate = Number(/^tps = ([0-9.]+)/m.exec(r.out)?.[1] ?? Number.NaN);
    const ops = Number(/^number of transactions actually processed: (\d+)/m.exec(r.out)?.[1] ?? 0);
    const failedTx = Number(/^number of failed transactions: (\d+)/m.exec(r.out)?.[1] ?? 0);
    if (r.status !== 0 || !Number.isFinite(rate) || ops === 0 || failedTx > 0) {
      return failed(`pgbench ${selectOnly ? "-S" : "tpcb"}`, r.out);
    }
    // Log lines: client_id transaction_no time_us script_no time_epoch time_us_part.
    const lat: number[] = [];
    for (const f of fs.readdirSync(dir)) {
      for (const line of fs.readFileSync(path.join(dir, f), "utf8").split("\n")) {
        const us = Number(line.split(" ")[2]);
        if (Number.isFinite(us) && line) lat.push(us / 1000);
      }
    }
    lat.sort((a, b) => a - b);
    const at = (q: number) => lat[Math.min(lat.length - 1, Math.floor(q * lat.length))] ?? Number.NaN;
    return { rate, p50: at(0.5), p99: at(0.99), ops };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const LOADGEN = path.resolve(__dirname, "../lib/apps/loadgen.js");

interface LoadgenOut {
  ops: number;
  rate: number;
  p50: number;
  p99: number;
  byOp: Record<string, { n: number; p50: number; p99: number }>;
  errors: number;
  firstError: string;
}

/** Our own client (loadgen.js) for memcached and etcd; etcd's result is split per op. */
export function loadgen(client: Place, ip: string, app: "memcached" | "etcd", seconds: number): Record<string, Sample> {
  const port = String(PORTS[app]);
  const r = runClient(
    client,
    [process.execPath, LOADGEN, app, ip, port, String(seconds), String(LOADGEN_WORKERS)],
    seconds,
  );
  let j: LoadgenOut | undefined;
  try {
    j = JSON.parse(
      r.out
        .trim()
        .split("\n")
        .find((l) => l.startsWith("{")) ?? "",
    );
  } catch {
    j = undefined;
  }
  if (r.status !== 0 || !j || j.ops === 0 || j.errors > 0) {
    return { all: failed(`loadgen ${app}${j?.firstError ? ` (${j.errors} errors: ${j.firstError})` : ""}`, r.out) };
  }
  const out: Record<string, Sample> = { all: { rate: j.rate, p50: j.p50, p99: j.p99, ops: j.ops } };
  // etcd: every worker alternates put and range, so each op's rate is half the total.
  for (const [op, s] of Object.entries(j.byOp)) out[op] = { rate: s.n / seconds, p50: s.p50, p99: s.p99, ops: s.n };
  return out;
}

export type Step = (client: Place, ip: string, seconds: number) => Partial<Record<Workload, Sample>>;

const pick = (r: Record<string, Sample>, k: string) => r[k] ?? (r.all as Sample);

/**
 * Each client invocation as one step (redis-benchmark and the etcd client measure two
 * workloads each); a round runs every step on every path before the next step.
 */
export const STEPS: Step[] = [
  (c, ip, s) => ({ "nginx-small": wrk(c, ip, FILES.small, s) }),
  (c, ip, s) => ({ "nginx-64k": wrk(c, ip, FILES.large, s) }),
  (c, ip, s) => {
    const r = redisBench(c, ip, s, 1);
    return { "redis-get": pick(r, "GET"), "redis-set": pick(r, "SET") };
  },
  (c, ip, s) => {
    const r = redisBench(c, ip, s, 16);
    return { "redis-get-p16": pick(r, "GET"), "redis-set-p16": pick(r, "SET") };
  },
  (c, ip, s) => ({ "pg-select": pgbench(c, ip, s, true) }),
  (c, ip, s) => ({ "pg-tpcb": pgbench(c, ip, s, false) }),
  (c, ip, s) => {
    const r = loadgen(c, ip, "etcd", s);
    return { "etcd-put": pick(r, "put"), "etcd-get": pick(r, "get") };
  },
  (c, ip, s) => ({ memcached: pick(loadgen(c, ip, "memcached", s), "all") }),
];

/** Run once, untimed, before the rounds: nginx (first connections) and both Redis steps. */
export const WARMUP_STEPS: Step[] = [STEPS[0], STEPS[2], STEPS[3]].filter((s): s is Step => s !== undefined);
