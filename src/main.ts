/**
 * Entry point of the `netkit-cni` executable. As a CNI plugin (CNI_COMMAND set) it reads
 * the network configuration from stdin, runs one verb, and prints exactly one JSON
 * document on stdout: the result, or the spec's error object with exit status 1.
 * Diagnostics go to the configured log file only. Where the conflist is the node agent's
 * and the agent does verbs (`agent --serve-verbs`), the verb is done there instead, with
 * the same outcome (agent/verbs).
 */
import * as fs from "node:fs";
import { handToAgent } from "./agent/verbs/client";
import { handOverConf, verbSocketPath } from "./agent/verbs/protocol";
import type { Outcome } from "./commands/invoke";
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
  const outcome = handedToAgent(stdin) ?? (await doneHere(stdin));
  if (outcome.stdout !== "") writeStdout(outcome.stdout);
  return outcome.exitCode;
}

/**
 * The verb as the node's agent did it, or undefined when this process is to do it. Only
 * this module and what it imports load before: a handed verb's start is the executable's
 * start and these few modules (the Bun build splits the rest off, scripts/build.mjs).
 */
function handedToAgent(stdin: Buffer): Outcome | undefined {
  const conf = handOverConf(stdin);
  // No socket, no agent serving verbs: nothing to connect to.
  if (!conf?.agentStateDir || !fs.existsSync(verbSocketPath(conf.agentStateDir))) return undefined;
  return handToAgent(conf, stdin, process.env);
}

/** The verb done in this process, by the plugin's whole code, loaded only now. */
async function doneHere(stdin: Buffer): Promise<Outcome> {
  const { invokePlugin } = await import("./commands/invoke");
  return invokePlugin(stdin, process.env);
}

main().then((code) => {
  process.exitCode = code;
});
