/** The JSON document one benchmark run writes (bench/results/<date>-<kernel>.json). */
import type { AgentScaleRun } from "./agent-scale";
import type { AppsRun } from "./apps/index";
import type { BandwidthRun } from "./bandwidth";
import type { OlderRun } from "./bandwidth-older";
import type { CpId, CycleResult, RssResult, StormResult } from "./control-plane";
import type { CrossingResult, NetperfRun } from "./dataplane";
import type { KernelFloor } from "./kernel-floor";
import type { PathId } from "./paths";
import type { PolicyRun } from "./policy-result";
import type { ServicesRun } from "./services";
import type { SockBypassRun } from "./sockbypass";
import type { StartupReport } from "./startup";
import type { VerbAgentMemory } from "./verb-agent";
import type { InProcessTimes } from "./verb-times";

export interface BenchResult {
  schema: 1;
  /** "host": this machine's kernel; "vm": the UML guest with netkit. */
  kind: "host" | "vm";
  startedAt: string;
  finishedAt: string;
  durationS: number;
  machine: {
    kernel: string;
    kernelVersion: string;
    os: string;
    cpu: string;
    cpus: number;
    memGiB: number;
    node: string;
    netperf: string;
    sockperf?: string;
    /** Absent in runs before the rate-limit section. */
    iperf3?: string;
    plugin: { sha256: string; builtAt: string; commit: string; srcChanged: boolean };
  };
  settings: RunSettings;
  paths?: PathId[];
  crossings?: CrossingResult[];
  netperf?: NetperfRun;
  controlPlane?: {
    cycles: Partial<Record<CpId, CycleResult>>;
    storms: Partial<Record<CpId, StormResult[]>>;
    rss: Partial<Record<CpId, RssResult>>;
    /** Absent in runs before it was measured. */
    kernelFloor?: KernelFloor;
    /** The ours-agent row's agent: its memory before and after the verbs it did. */
    verbAgent?: VerbAgentMemory;
    /** The agent rows' verbs as the process that did them timed them (absent before it was measured). */
    inProcess?: Partial<Record<CpId, InProcessTimes>>;
  };
  startup?: StartupReport;
  sockBypass?: SockBypassRun;
  apps?: AppsRun;
  /** Runs before two bursts and both loaded directions have the older shape (bandwidth-older.ts). */
  bandwidth?: BandwidthRun | OlderRun;
  /** Service traffic: translated at connect, kube-proxy's DNAT, and pod to pod. */
  services?: ServicesRun;
  /** NetworkPolicy's cost: no policy, policy on but none for the pods, 100 policies with a few selecting them. */
  policy?: PolicyRun;
  /** The agent at cluster scale: first sync, one change's latency, memory. */
  agent?: AgentScaleRun;
}

/** The counts a run was made with (bench/main.ts's options, as a results file keeps them). */
export interface RunSettings {
  rounds: number;
  seconds: number;
  pings: number;
  transactions: number;
  cycles: number;
  storm: number;
  stormRepeats: number;
  concurrency: number;
  /** Absent in runs before the socket bypass section. */
  sockRounds?: number;
  /** Absent in runs before the applications section. */
  appRounds?: number;
  appSeconds?: number;
  /** Absent in runs before the rate-limit section. */
  bwRounds?: number;
  bwSeconds?: number;
  /** Absent in runs before the agent section. */
  agentChanges?: number;
  skipped: string[];
}
