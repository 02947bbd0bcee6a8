/**
 * Entry point of the `netkit-cni` executable. As a CNI plugin (CNI_COMMAND set) it reads
 * the network configuration from stdin, runs one verb, and prints exactly one JSON
 * document on stdout: the result, or the spec's error object with exit status 1.
 * Diagnostics go to the configured log file only. Where the conflist is the node agent's
 * and the agent does verbs (`agent --serve-verbs`), the verb is done there instead, with
 * the same outcome (agent/verbs).
 */
import * as fs from "node:fs";
import { verbSocketPath } from "./agent/verbs/protocol";
import { type NetConf, parseNetConf } from "./cni/config";
import { invokePlugin, type Outcome } from "./commands/invoke";
import { readAllStdin, writeStdout } from "./sys/stdio";

const ABOUT = "netkit-cni: CNI plugin giving pods netkit or veth devices with eBPF fast paths";

async function main(): Promise<number> {
  // Commands for people take arguments; runtimes never pass any.
  // Imported only here: the commands for people load modules (node:util's argument
  // parser among them) that no verb needs, and every verb pays for what its start loads.
  if (!process.env.CNI_COMMAND && process.argv.length > 2) {
    const { runCli } = await import("./cli/index");
    return runCli(process.argv.slice(2));
  }
  if (!process.env.CNI_COMMAND) {
    process.stderr.write(`${ABOUT}\nRun by a container runtime with CNI_COMMAND set; see README.md.\n`);
  }
  const stdin = readAllStdin();
  const conf = parsedOrUndefined(stdin);
  const outcome =
    (conf && (await handedToAgent(conf, stdin))) ?? (await invokePlugin(stdin, process.env, { parsed: conf }));
  if (outcome.stdout !== "") writeStdout(outcome.stdout);
  return outcome.exitCode;
}

/** The configuration, parsed once for both uses; a refusal is for the verb to report. */
function parsedOrUndefined(stdin: Buffer): NetConf | undefined {
  try {
    return parseNetConf(stdin);
  } catch {
    return undefined;
  }
}

/** The verb as the node's agent did it, or undefined when this process is to do it. */
async function handedToAgent(conf: NetConf, stdin: Buffer): Promise<Outcome | undefined> {
  // No socket, no agent serving verbs: the client module is not even loaded.
  if (!conf.agentStateDir || !fs.existsSync(verbSocketPath(conf.agentStateDir))) return undefined;
  const { handToAgent } = await import("./agent/verbs/client");
  return handToAgent(conf, stdin, process.env);
}

main().then((code) => {
  process.exitCode = code;
});
