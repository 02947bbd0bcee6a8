/**
 * The flags of the commands that show a node's state (`endpoints`, `status`, `monitor`,
 * `flows`),
 * each declared once in a table (../args.ts) that parses them and writes their usage, so
 * `--help` and a misspelt flag both show what the command takes.
 */

import { type Flags, flagsFor, flagUsage, parseFlags } from "../args";
import { DEFAULT_BPFFS_ROOT } from "../cni/defaults";
import { DEFAULT_AGENT_STATE_DIR } from "../commands/agent-state";
import { FILTER_FIELDS, type FilterField, FlowFilterError, readFilterValue } from "../flows/filter";
import { DEFAULT_AGENT_URL, type FlowsOptions } from "./flows";
import type { MonitorOptions } from "./monitor";
import { DOCUMENT_OUTPUTS, type Output, outputFlags, STREAM_OUTPUTS } from "./output";

/** A command line this CLI cannot read: the message says what, and the usage follows. */
export class UsageError extends Error {}

export interface EndpointsOptions {
  output: Output;
  bpffsRoot: string;
  /** Where ADD recorded each pod's namespace and name (the agent's state directory). */
  stateDir: string;
}

export interface StatusOptions {
  output: Output;
  bpffsRoot: string;
  stateDir: string;
}

const usageError = (message: string) => new UsageError(message);
const BPFFS_HELP = `where the node's eBPF state is pinned (${DEFAULT_BPFFS_ROOT})`;
const STATE_HELP = `the agent's files: its sync, NetworkPolicy (${DEFAULT_AGENT_STATE_DIR})`;

const endpointsFlag = flagsFor<EndpointsOptions>();
const ENDPOINTS_FLAGS: Flags<EndpointsOptions> = {
  ...outputFlags<EndpointsOptions>(
    DOCUMENT_OUTPUTS,
    "table: the columns read at a glance; wide: every column;\njson: every row's facts",
    usageError,
  ),
  "bpffs-root": endpointsFlag.string("bpffsRoot", "DIR", DEFAULT_BPFFS_ROOT, BPFFS_HELP),
  "state-dir": endpointsFlag.string(
    "stateDir",
    "DIR",
    DEFAULT_AGENT_STATE_DIR,
    `the agent's files, where ADD records pods' names (${DEFAULT_AGENT_STATE_DIR})`,
  ),
};

const statusFlag = flagsFor<StatusOptions>();
const STATUS_FLAGS: Flags<StatusOptions> = {
  ...outputFlags<StatusOptions>(
    DOCUMENT_OUTPUTS,
    "table: the report; wide: the same (it shows every fact\nalready); json: the facts as a document",
    usageError,
  ),
  "bpffs-root": statusFlag.string("bpffsRoot", "DIR", DEFAULT_BPFFS_ROOT, BPFFS_HELP),
  "state-dir": statusFlag.string("stateDir", "DIR", DEFAULT_AGENT_STATE_DIR, STATE_HELP),
};

/** --for-seconds of the commands that stream (monitor, flows): milliseconds to stop after. */
const FOR_SECONDS_HELP = "stop after N seconds (default: when interrupted)";
function forSeconds(text: string, flag: string): number {
  const seconds = Number(text);
  if (!Number.isFinite(seconds) || seconds <= 0) throw new UsageError(`${flag} must be a positive number`);
  return seconds * 1000;
}

const monitorFlag = flagsFor<MonitorOptions>();
const MONITOR_FLAGS: Flags<MonitorOptions> = {
  ...outputFlags<MonitorOptions>(
    STREAM_OUTPUTS,
    "table: a line per drop; wide: the same; json, jsonl:\none JSON object per drop, a line each (a stream)",
    usageError,
  ),
  "bpffs-root": monitorFlag.string("bpffsRoot", "DIR", DEFAULT_BPFFS_ROOT, BPFFS_HELP),
  "state-dir": monitorFlag.string("stateDir", "DIR", DEFAULT_AGENT_STATE_DIR, STATE_HELP),
  pod: monitorFlag.string("pod", "NS/NAME", undefined, "only this pod's drops (or its host device)"),
  reason: monitorFlag.string(
    "reason",
    "REASON",
    undefined,
    "only drops for this reason: denied | tier-denied | revoked | pending | incomplete | fragment | opaque",
  ),
  direction: monitorFlag.string("direction", "DIR", undefined, "only ingress | egress", (text, flag) => {
    if (text !== "ingress" && text !== "egress") throw new UsageError(`${flag} must be ingress or egress`);
    return text;
  }),
  "for-seconds": monitorFlag.string("forMs", "N", undefined, FOR_SECONDS_HELP, forSeconds),
};

const flowsFlag = flagsFor<FlowsOptions>();
/** A filter flag: repeated, any of its values matches (as the agent's query reads them). */
const filterFlag = (field: FilterField, arg: string, help: string) => ({
  [FILTER_FIELDS[field].key]: flowsFlag.list(field, arg, help, (text) => {
    try {
      return [readFilterValue(field, text)] as FlowsOptions[typeof field];
    } catch (e) {
      throw e instanceof FlowFilterError ? new UsageError(e.message) : e;
    }
  }),
});
const FLOWS_FLAGS: Flags<FlowsOptions> = {
  ...outputFlags<FlowsOptions>(
    STREAM_OUTPUTS,
    "table: a line per flow; wide: with its reason, tier, state and\ndatapath; json, jsonl: the agent's record, one a line",
    usageError,
  ),
  agent: flowsFlag.string(
    "agent",
    "URL",
    DEFAULT_AGENT_URL,
    `the node's agent, run with --flows (${DEFAULT_AGENT_URL})`,
    (text, flag) => {
      if (!/^https?:\/\/[^/]/.test(text))
        throw new UsageError(`${flag} must be an http:// or https:// URL, not ${text}`);
      return text;
    },
  ),
  last: flowsFlag.string("last", "N", 100, "the newest N records that match first (100; 0: none)", (text, flag) => {
    if (!/^\d+$/.test(text)) throw new UsageError(`${flag} must be a number, 0 or more`);
    return Number(text);
  }),
  follow: { ...flowsFlag.boolean("follow", "then each new record that matches, until interrupted"), short: "f" },
  ...filterFlag(
    "fromPod",
    "NS/NAME",
    "only flows from this pod (NS/: any pod of NS); each filter\nflag may be repeated: any of its values matches",
  ),
  ...filterFlag("toPod", "NS/NAME", "only flows to this pod (NS/: any pod of NS)"),
  ...filterFlag("pod", "NS/NAME", "only flows from or to this pod (NS/: any pod of NS)"),
  ...filterFlag("namespace", "NS", "only flows from or to this namespace"),
  ...filterFlag("verdict", "V", "only forwarded | dropped | audit"),
  ...filterFlag("protocol", "P", "only TCP | UDP | SCTP | ICMP | ICMPv6 (or a number)"),
  ...filterFlag("port", "N", "only flows from or to this port"),
  ...filterFlag("policy", "NAME", "only flows this rule or policy decided (a part of its name)"),
  ...filterFlag("direction", "DIR", "only ingress | egress (for the pod whose policy judged it)"),
  ...filterFlag("state", "S", "only new | revoked | ended (an ended flow's record carries its packets and bytes)"),
  ...filterFlag("node", "NODE", "only flows this node judged"),
  "for-seconds": flowsFlag.string("forMs", "N", undefined, FOR_SECONDS_HELP, forSeconds),
};

const WIDTH = 22;
export const ENDPOINTS_USAGE = `usage: netkit-cni endpoints [options]
The pods wired on this node, with their fast-path counters.
${flagUsage(ENDPOINTS_FLAGS, WIDTH)}`;
export const STATUS_USAGE = `usage: netkit-cni status [options]
The node's kernel features, programs and links, endpoints, maps, the agent's sync and
NetworkPolicy, and every problem found (exit status 1 when there are problems).
${flagUsage(STATUS_FLAGS, WIDTH)}`;
export const MONITOR_USAGE = `usage: netkit-cni monitor [options]
NetworkPolicy's drops as they happen: time, pods, 5-tuple, direction, reason.
${flagUsage(MONITOR_FLAGS, WIDTH)}`;

export const FLOWS_USAGE = `usage: netkit-cni flows [options]
The flows NetworkPolicy judged on this node, as its agent (run with --flows) keeps them:
the newest that match, then with -f each new one. docs/flows.md tells each field.
${flagUsage(FLOWS_FLAGS, WIDTH)}`;

function errorsFor(usage: string) {
  return {
    unknown: (arg: string) => new UsageError(`unknown option ${arg}\n${usage}`),
    noValue: (flag: string) => new UsageError(`${flag} needs a value`),
  };
}

export const parseEndpointsOptions = (args: string[]) => parseFlags(args, ENDPOINTS_FLAGS, errorsFor(ENDPOINTS_USAGE));
export const parseStatusOptions = (args: string[]) => parseFlags(args, STATUS_FLAGS, errorsFor(STATUS_USAGE));
export const parseMonitorOptions = (args: string[]) => parseFlags(args, MONITOR_FLAGS, errorsFor(MONITOR_USAGE));
export const parseFlowsOptions = (args: string[]) => parseFlags(args, FLOWS_FLAGS, errorsFor(FLOWS_USAGE));
