/**
 * The bench's options: each kind's defaults and the flags that change them, read with the
 * CLI's flag reader (src/args.ts), so both speak one syntax ("--rounds 3" and
 * "--rounds=3") and refuse what they do not know the same way.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { type FlagTable, readFlags } from "../../src/args";
import type { RunSettings } from "./result";

/** The run's settings (kept in its results file) and what only this process needs. */
export interface Options
  extends Omit<
    RunSettings,
    "skipped" | "sockRounds" | "appRounds" | "appSeconds" | "bwRounds" | "bwSeconds" | "agentChanges"
  > {
  rssRuns: number;
  startupRuns: number;
  profileRuns: number;
  /** Socket bypass rounds (each: 3 variants × 4 sizes × TCP_RR, TCP_STREAM, sockperf). */
  sockRounds: number;
  /** Application rounds (each: every workload on every path and placement) and seconds per test. */
  appRounds: number;
  appSeconds: number;
  /** Rate-limit rounds (each: every variant and limit, both ways, then the latency tests) and seconds per test. */
  bwRounds: number;
  bwSeconds: number;
  /** Changes timed per size in the agent section (each: a Service added and withdrawn, or a Node added, moved, deleted). */
  agentChanges: number;
  /** One short round on one path; every workload must complete, nothing is written. */
  smoke: boolean;
  skip: Set<string>;
  baseline?: string;
}

export const SECTIONS = [
  "crossings",
  "netperf",
  "control",
  "startup",
  "sockbypass",
  "apps",
  "bandwidth",
  "services",
  "policy",
  "agent",
];

/** The flags (bench/main.ts's header lists them), read by the CLI's own parser. */
const FLAGS = {
  rounds: { type: "string" },
  seconds: { type: "string" },
  pings: { type: "string" },
  transactions: { type: "string" },
  cycles: { type: "string" },
  storm: { type: "string" },
  concurrency: { type: "string" },
  baseline: { type: "string" },
  "sock-rounds": { type: "string" },
  "app-rounds": { type: "string" },
  "app-seconds": { type: "string" },
  "bw-rounds": { type: "string" },
  "bw-seconds": { type: "string" },
  "agent-changes": { type: "string" },
  smoke: { type: "boolean" },
  skip: { type: "string" },
  only: { type: "string" },
  quick: { type: "boolean" },
} as const satisfies FlagTable;

const FLAG_ERRORS = {
  unknown: (arg: string) => new Error(`unknown option ${arg}`),
  noValue: (flag: string) => new Error(`${flag} needs a value`),
};

/** The flags that set a count as given: the field each one sets. */
const COUNTS = {
  rounds: "rounds",
  seconds: "seconds",
  pings: "pings",
  transactions: "transactions",
  cycles: "cycles",
  storm: "storm",
  concurrency: "concurrency",
  "sock-rounds": "sockRounds",
  "app-rounds": "appRounds",
  "bw-rounds": "bwRounds",
  "agent-changes": "agentChanges",
} as const satisfies Partial<Record<keyof typeof FLAGS, keyof Options>>;

/** A run's options: the kind's defaults, then the flags in the order given. */
export function parseOptions(kind: "host" | "vm", argv: string[]): Options {
  const o = defaults(kind);
  for (const { name, flag, value: given } of readFlags(argv, FLAGS, FLAG_ERRORS)) {
    const text = given ?? "";
    const value = () => {
      const v = Number(text);
      if (!Number.isFinite(v) || v < 0) throw new Error(`${flag} needs a number`);
      return v;
    };
    const field = COUNTS[name as keyof typeof COUNTS];
    if (field) {
      o[field] = value();
      continue;
    }
    switch (name) {
      case "baseline":
        o.baseline = path.resolve(text);
        if (!fs.existsSync(o.baseline)) throw new Error(`--baseline: ${o.baseline} does not exist`);
        break;
      case "app-seconds":
        o.appSeconds = Math.max(1, Math.round(value()));
        break;
      case "bw-seconds":
        // iperf3 and netperf take whole seconds.
        o.bwSeconds = Math.max(1, Math.round(value()));
        break;
      case "smoke":
        o.smoke = true;
        o.appRounds = 1;
        o.appSeconds = 1;
        for (const s of SECTIONS) if (s !== "apps") o.skip.add(s);
        break;
      case "skip":
        for (const s of text.split(",")) if (s) o.skip.add(s);
        break;
      case "only": {
        const only = new Set(text.split(",").filter(Boolean));
        for (const s of only) if (!SECTIONS.includes(s)) throw new Error(`--only: unknown section ${s}`);
        for (const s of SECTIONS) if (!only.has(s)) o.skip.add(s);
        break;
      }
      case "quick":
        Object.assign(o, {
          rounds: 1,
          seconds: 1,
          pings: 20,
          transactions: 100,
          cycles: Math.min(o.cycles, 3),
          storm: Math.min(o.storm, 10),
          stormRepeats: Math.min(o.stormRepeats, 1),
          rssRuns: Math.min(o.rssRuns, 1),
          startupRuns: Math.min(o.startupRuns, 2),
          profileRuns: Math.min(o.profileRuns, 1),
          sockRounds: Math.min(o.sockRounds, 1),
          appRounds: Math.min(o.appRounds, 1),
          appSeconds: 1,
          bwRounds: Math.min(o.bwRounds, 1),
          bwSeconds: 2,
          agentChanges: Math.min(o.agentChanges, 2),
        });
        break;
    }
  }
  return o;
}

/** What a run measures unless told otherwise: the full bench here, a correctness round in the guest. */
function defaults(kind: "host" | "vm"): Options {
  return kind === "host"
    ? {
        rounds: 7,
        seconds: 2,
        pings: 200,
        transactions: 1000,
        cycles: 30,
        storm: 100,
        stormRepeats: 2,
        concurrency: 16,
        rssRuns: 5,
        startupRuns: 10,
        profileRuns: 5,
        sockRounds: 3,
        appRounds: 4,
        appSeconds: 2,
        bwRounds: 3,
        bwSeconds: 5,
        agentChanges: 10,
        smoke: false,
        skip: new Set(),
      }
    : {
        rounds: 3,
        seconds: 2,
        pings: 200,
        transactions: 1000,
        cycles: 0,
        storm: 0,
        stormRepeats: 0,
        concurrency: 4,
        rssRuns: 0,
        startupRuns: 0,
        profileRuns: 0,
        sockRounds: 1,
        appRounds: 1,
        appSeconds: 1,
        bwRounds: 1,
        bwSeconds: 3,
        agentChanges: 0,
        smoke: false,
        skip: new Set(["control", "startup", "agent"]),
      };
}
