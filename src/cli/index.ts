/**
 * Commands for people (`netkit-cni endpoints`, …), as opposed to the CNI protocol that
 * runtimes speak through CNI_COMMAND. Each prints to stdout and returns an exit status.
 */
import { DEFAULT_BPFFS_ROOT } from "../cni/config";
import { formatEndpoints, listEndpoints } from "./endpoints";

const USAGE = `usage: netkit-cni <command> [options]
commands:
  endpoints [--json] [--bpffs-root DIR]   pods wired on this node, with fast-path counters
Without a command, netkit-cni acts as a CNI plugin (CNI_COMMAND in the environment).`;

interface Options {
  json: boolean;
  bpffsRoot: string;
}

function parseOptions(args: string[]): Options {
  const opts: Options = { json: false, bpffsRoot: DEFAULT_BPFFS_ROOT };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--json") opts.json = true;
    else if (arg === "--bpffs-root" && args[i + 1]) opts.bpffsRoot = args[++i] as string;
    else throw new Error(`unknown option ${arg}`);
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
