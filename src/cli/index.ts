/**
 * Commands for people (`netkit-cni endpoints`, …), as opposed to the CNI protocol that
 * runtimes speak through CNI_COMMAND. Each prints to stdout and returns an exit status.
 */
import { podNames } from "../commands/agent-state";
import { listEndpoints } from "../commands/endpoints";
import { formatInstall, install } from "../install/install";
import { INSTALL_USAGE, InstallError, parseInstallOptions } from "../install/options";
import { formatEndpoints, withPodNames } from "./endpoints";
import { render } from "./output";
import { nodeStatus } from "./status";
import { formatStatus } from "./status-format";
import {
  ENDPOINTS_USAGE,
  FLOWS_USAGE,
  MONITOR_USAGE,
  parseEndpointsOptions,
  parseFlowsOptions,
  parseMonitorOptions,
  parseStatusOptions,
  STATUS_USAGE,
  UsageError,
} from "./view-options";

const USAGE = `usage: netkit-cni <command> [options]     (<command> --help: its options)
commands:
  endpoints   pods wired on this node, with fast-path counters
  status      kernel features, programs and links, endpoints, maps, the agent, problems
              (exit status 1 when there are problems)
  monitor     NetworkPolicy's drops as they happen
  flows       the flows NetworkPolicy judged, allowed and denied, from the agent (--flows)
  install     copy this executable and a conflist into the CNI directories
  agent       the node's side of a cluster network: conflist, routes to other nodes,
              masquerade, Services, NetworkPolicy, metrics
endpoints, status, monitor and flows print a table; -o wide and -o json (or --json) as
kubectl does.
Without a command, netkit-cni acts as a CNI plugin (CNI_COMMAND in the environment).`;

export async function runCli(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const help = HELP[command ?? ""];
  if (help && rest.includes("--help")) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  try {
    switch (command) {
      case "endpoints": {
        const opts = parseEndpointsOptions(rest);
        const rows = withPodNames(await listEndpoints(opts.bpffsRoot), podNames(opts.stateDir));
        process.stdout.write(`${render(opts.output, rows, (wide) => formatEndpoints(rows, wide))}\n`);
        return 0;
      }
      case "status": {
        const opts = parseStatusOptions(rest);
        const status = await nodeStatus(opts.bpffsRoot, opts.stateDir);
        // Its report shows every fact already: wide is the same table.
        process.stdout.write(`${render(opts.output, status, () => formatStatus(status))}\n`);
        return status.problems.length > 0 ? 1 : 0;
      }
      case "install": {
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
      case "flows": {
        const { runFlows } = await import("./flows");
        const opts = parseFlowsOptions(rest);
        return await runFlows(
          opts,
          (line) => process.stdout.write(`${line}\n`),
          (line) => process.stderr.write(`netkit-cni flows: ${line}\n`),
        );
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
    return e instanceof UsageError ? 2 : 1;
  }
}

/** The commands whose `--help` prints their usage here (agent prints its own). */
const HELP: Record<string, string> = {
  endpoints: ENDPOINTS_USAGE,
  status: STATUS_USAGE,
  monitor: MONITOR_USAGE,
  flows: FLOWS_USAGE,
  install: INSTALL_USAGE,
};
