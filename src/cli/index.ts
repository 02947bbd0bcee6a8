/**
 * Commands for people (`netkit-cni endpoints`, …), as opposed to the CNI protocol that
 * runtimes speak through CNI_COMMAND. Each prints to stdout and returns an exit status.
 */
import { DEFAULT_BPFFS_ROOT } from "../cni/config";
import { DEFAULT_AGENT_STATE_DIR } from "../commands/agent-state";
import { readFlags } from "./args";
import { formatEndpoints, listEndpoints } from "./endpoints";
import { formatInstall, install } from "./install";
import { INSTALL_USAGE, InstallError, parseInstallOptions } from "./install-options";
import type { MonitorOptions } from "./monitor";
import { nodeStatus } from "./status";
import { formatStatus } from "./status-format";

const USAGE = `usage: netkit-cni <command> [options]
commands:
  endpoints [--json] [--bpffs-root DIR]   pods wired on this node, with fast-path counters
  status [--json] [--bpffs-root DIR] [--state-dir DIR]
                                          kernel features, programs and links, endpoints, problems
                                          (exit status 1 when there are problems)
  monitor [--json] [--bpffs-root DIR] [--state-dir DIR] [--pod NS/NAME] [--reason denied|pending|opaque]
          [--direction ingress|egress] [--for-seconds N]
                                          NetworkPolicy's drops as they happen
  install [options]                       copy this executable and a conflist into the CNI
                                          directories (install --help for the options)
  agent [options]                         the node's side of a cluster network: conflist, routes
                                          to other nodes, masquerade, metrics (agent --help)
Without a command, netkit-cni acts as a CNI plugin (CNI_COMMAND in the environment).`;

interface Options {
  json: boolean;
  bpffsRoot: string;
  stateDir: string;
}

const VIEW_FLAGS = {
  json: { type: "boolean" },
  "bpffs-root": { type: "string" },
  "state-dir": { type: "string" },
} as const;

const unknownOption = (arg: string) => new Error(`unknown option ${arg}`);

function parseOptions(args: string[]): Options {
  const opts: Options = { json: false, bpffsRoot: DEFAULT_BPFFS_ROOT, stateDir: DEFAULT_AGENT_STATE_DIR };
  // --bpffs-root without a directory is as unknown as any other misspelling.
  for (const f of readFlags(args, VIEW_FLAGS, { unknown: unknownOption, noValue: (_, arg) => unknownOption(arg) })) {
    if (f.name === "json") opts.json = true;
    else if (f.name === "state-dir") opts.stateDir = f.value as string;
    else opts.bpffsRoot = f.value as string;
  }
  return opts;
}

const MONITOR_FLAGS = {
  json: { type: "boolean" },
  "bpffs-root": { type: "string" },
  "state-dir": { type: "string" },
  pod: { type: "string" },
  reason: { type: "string" },
  direction: { type: "string" },
  "for-seconds": { type: "string" },
} as const;

function parseMonitorOptions(args: string[]): MonitorOptions {
  const opts: MonitorOptions = {
    bpffsRoot: DEFAULT_BPFFS_ROOT,
    stateDir: DEFAULT_AGENT_STATE_DIR,
    json: false,
    pod: undefined,
    reason: undefined,
    direction: undefined,
    forMs: undefined,
  };
  const noValue = (flag: string) => new Error(`${flag} needs a value`);
  for (const f of readFlags(args, MONITOR_FLAGS, { unknown: unknownOption, noValue })) {
    const v = f.value ?? "";
    if (f.name === "json") opts.json = true;
    else if (f.name === "bpffs-root") opts.bpffsRoot = v;
    else if (f.name === "state-dir") opts.stateDir = v;
    else if (f.name === "pod") opts.pod = v;
    else if (f.name === "reason") opts.reason = v;
    else if (f.name === "direction") {
      if (v !== "ingress" && v !== "egress") throw new Error("--direction must be ingress or egress");
      opts.direction = v;
    } else {
      const s = Number(v);
      if (!Number.isFinite(s) || s <= 0) throw new Error("--for-seconds must be a positive number");
      opts.forMs = s * 1000;
    }
  }
  return opts;
}

export async function runCli(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case "endpoints": {
        const opts = parseOptions(rest);
        const rows = await listEndpoints(opts.bpffsRoot);
        process.stdout.write(`${opts.json ? JSON.stringify(rows, null, 2) : formatEndpoints(rows)}\n`);
        return 0;
      }
      case "status": {
        const opts = parseOptions(rest);
        const status = await nodeStatus(opts.bpffsRoot, opts.stateDir);
        process.stdout.write(`${opts.json ? JSON.stringify(status, null, 2) : formatStatus(status)}\n`);
        return status.problems.length > 0 ? 1 : 0;
      }
      case "install": {
        if (rest.includes("--help")) {
          process.stdout.write(`${INSTALL_USAGE}\n`);
          return 0;
        }
        try {
          const opts = parseInstallOptions(rest);
          const report = install(opts);
          process.stdout.write(`${opts.json ? JSON.stringify(report, null, 2) : formatInstall(report)}\n`);
          return 0;
        } catch (e) {
          if (!(e instanceof InstallError)) throw e;
          process.stderr.write(`netkit-cni install: ${e.message}\n`);
          return e.message.startsWith("unknown option") ? 2 : 1;
        }
      }
      case "monitor": {
        const { runMonitor } = await import("./monitor");
        const opts = parseMonitorOptions(rest);
        return await runMonitor(opts, (line) => process.stdout.write(`${line}\n`));
      }
      case "agent": {
        // Its own bundle, loaded only here (cli/agent.ts).
        const { runEmbeddedAgent } = await import("./agent");
        return await runEmbeddedAgent(rest);
      }
      case "help":
      case "--help":
        process.stdout.write(`${USAGE}\n`);
        return 0;
      default:
        process.stderr.write(`${USAGE}\n`);
        return 2;
    }
  } catch (e) {
    process.stderr.write(`netkit-cni ${command}: ${(e as Error).message}\n`);
    return 1;
  }
}
