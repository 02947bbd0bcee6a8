/**
 * Entry point of the `netkit-cni` executable. As a CNI plugin (CNI_COMMAND set) it reads
 * the network configuration from stdin, runs one verb, and prints exactly one JSON
 * document on stdout: the result, or the spec's error object with exit status 1.
 * Diagnostics go to the configured log file only.
 */
import { parseNetConf } from "./cni/config";
import { parseEnv } from "./cni/env";
import { asCniError, CniError, ErrorCode, renderError } from "./cni/errors";
import { renderResult } from "./cni/result";
import { LATEST_VERSION, requireVerbInVersion, versionInfo } from "./cni/version";
import type { Invocation } from "./commands/invocation";
import { log } from "./log";
import { readAllStdin, writeStdout } from "./sys/stdio";

const ABOUT = "netkit-cni: CNI plugin giving pods netkit or veth devices with eBPF fast paths";

/** The version to render an error in: the config's if it got that far, else the latest. */
function versionForErrors(stdin: Buffer): string {
  try {
    const v = (JSON.parse(stdin.toString("utf8")) as { cniVersion?: unknown }).cniVersion;
    return typeof v === "string" && v !== "" ? v : LATEST_VERSION;
  } catch {
    return LATEST_VERSION;
  }
}

async function runPlugin(stdin: Buffer): Promise<string | undefined> {
  const env = parseEnv(process.env);
  if (env.command === "VERSION") return JSON.stringify(versionInfo(versionForErrors(stdin)));

  const conf = parseNetConf(stdin);
  log.configure(conf.logFile, conf.logLevel);
  log.setContext(`${env.command} ${env.containerId}/${env.ifname} `);
  requireVerbInVersion(env.command, conf.cniVersion);
  const inv: Invocation = { env, conf, processEnv: process.env };
  log.debug(`netns=${env.netns} datapath=${conf.datapath}`);
  if (!conf.agentStateDir) return runVerb(inv);

  // A conflist of `netkit-cni agent`'s: the verb's time (and, for ADD and DEL, the pod's
  // name) is left for the agent's metrics.
  const { recordVerb } = await import("./commands/agent-state");
  const started = performance.now();
  let ok = false;
  try {
    const out = await runVerb(inv);
    ok = true;
    return out;
  } finally {
    recordVerb(conf, env, performance.now() - started, ok);
  }
}

async function runVerb(inv: Invocation): Promise<string | undefined> {
  const { env, conf } = inv;
  // Each verb's module is imported when it runs: a process runs one verb, and evaluating
  // the others' modules too is start-up time every invocation would pay.
  switch (env.command) {
    case "ADD": {
      const { cmdAdd } = await import("./commands/add");
      return JSON.stringify(renderResult(await cmdAdd(inv), conf.cniVersion));
    }
    case "DEL": {
      const { cmdDel } = await import("./commands/del");
      await cmdDel(inv);
      return undefined;
    }
    case "CHECK": {
      const { cmdCheck } = await import("./commands/check");
      await cmdCheck(inv);
      return undefined;
    }
    case "GC": {
      const { cmdGc } = await import("./commands/gc");
      await cmdGc(inv);
      return undefined;
    }
    case "STATUS": {
      const { cmdStatus } = await import("./commands/status");
      await cmdStatus(inv);
      return undefined;
    }
  }
}

/**
 * The environment is judged before the config is read, so its refusals find the log not
 * yet opened: open it where the config says, if the config can be read, since a runtime's
 * bad input is what an admin will look for there.
 */
function logWhereTheConfigSays(stdin: Buffer): void {
  try {
    const conf = parseNetConf(stdin);
    log.configure(conf.logFile, conf.logLevel);
    const { CNI_COMMAND = "", CNI_CONTAINERID = "", CNI_IFNAME = "" } = process.env;
    log.setContext(`${CNI_COMMAND} ${CNI_CONTAINERID}/${CNI_IFNAME} `);
  } catch {
    // No config to read: nowhere to log.
  }
}

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
  try {
    const out = await runPlugin(stdin);
    if (out !== undefined) writeStdout(`${out}\n`);
    return 0;
  } catch (e) {
    // Kernel refusals below the protocol layer become "datapath failure" with their text.
    // File-system errors (they carry a syscall name) are I/O failures.
    // By name: importing the classes would load the netlink and libc modules for every verb.
    const kernel = e instanceof Error && (e.name === "NetlinkError" || e.name === "ErrnoError");
    const io = (e as NodeJS.ErrnoException | undefined)?.syscall !== undefined;
    const err = asCniError(e, kernel ? ErrorCode.DatapathFailure : io ? ErrorCode.IoFailure : ErrorCode.Internal);
    if (!log.configured) logWhereTheConfigSays(stdin);
    log.error(`${err.message}${err.details ? ` (${err.details})` : ""}`);
    if (!(e instanceof CniError)) log.debug((e as Error).stack ?? "");
    writeStdout(`${JSON.stringify(renderError(err, versionForErrors(stdin)))}\n`);
    return 1;
  } finally {
    log.close();
  }
}

main().then((code) => {
  process.exitCode = code;
});
