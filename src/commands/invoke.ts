/**
 * One plugin invocation from its inputs to its outputs: the configuration's bytes and the
 * process environment in, the one JSON document for stdout and the exit status out. The
 * executable runs it for its own verb; the node's agent runs the same function for a verb
 * a plugin handed it (src/agent/verbs), so either way gives the same result, the same
 * errors and the same idempotence.
 */

import { parseNetConf } from "../cni/config";
import { parseEnv } from "../cni/env";
import { asCniError, CniError, ErrorCode, renderError } from "../cni/errors";
import { renderResult } from "../cni/result";
import { LATEST_VERSION, requireVerbInVersion, versionInfo, versionNamed } from "../cni/version";
import { log } from "../log";
import type { Invocation } from "./invocation";

export interface Outcome {
  /** What goes on stdout, newline included; "" when the verb prints nothing. */
  stdout: string;
  exitCode: number;
}

/** Runs the verb `processEnv` names on the configuration `stdin`; never throws. */
export async function invokePlugin(stdin: Buffer, processEnv: NodeJS.ProcessEnv): Promise<Outcome> {
  try {
    const out = await runPlugin(stdin, processEnv);
    return { stdout: out === undefined ? "" : `${out}\n`, exitCode: 0 };
  } catch (e) {
    // Kernel refusals below the protocol layer become "datapath failure" with their text.
    // File-system errors (they carry a syscall name) are I/O failures.
    // By name: importing the classes would load the netlink and libc modules for every verb.
    const kernel = e instanceof Error && (e.name === "NetlinkError" || e.name === "ErrnoError");
    const io = (e as NodeJS.ErrnoException | undefined)?.syscall !== undefined;
    const err = asCniError(e, kernel ? ErrorCode.DatapathFailure : io ? ErrorCode.IoFailure : ErrorCode.Internal);
    if (!log.configured) logWhereTheConfigSays(stdin, processEnv);
    log.error(`${err.message}${err.details ? ` (${err.details})` : ""}`);
    if (!(e instanceof CniError)) log.debug((e as Error).stack ?? "");
    return { stdout: `${JSON.stringify(renderError(err, versionForErrors(stdin)))}\n`, exitCode: 1 };
  } finally {
    log.close();
  }
}

/** The version to render an error in: the config's if it got that far, else the latest. */
function versionForErrors(stdin: Buffer): string {
  try {
    return versionNamed((JSON.parse(stdin.toString("utf8")) as { cniVersion?: unknown }).cniVersion);
  } catch {
    return LATEST_VERSION;
  }
}

async function runPlugin(stdin: Buffer, processEnv: NodeJS.ProcessEnv): Promise<string | undefined> {
  const env = parseEnv(processEnv);
  if (env.command === "VERSION") return JSON.stringify(versionInfo(versionForErrors(stdin)));

  const conf = parseNetConf(stdin);
  log.configure(conf.logFile, conf.logLevel);
  log.setContext(`${env.command} ${env.containerId}/${env.ifname} `);
  requireVerbInVersion(env.command, conf.cniVersion);
  const inv: Invocation = { env, conf, processEnv };
  log.debug(`netns=${env.netns} datapath=${conf.datapath}`);
  if (!conf.agentStateDir) return runVerb(inv);

  // A conflist of `netkit-cni agent`'s: the verb's time (and, for ADD and DEL, the pod's
  // name) is left for the agent's metrics.
  const { recordVerb } = await import("./agent-state");
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
      const { cmdAdd } = await import("./add");
      return JSON.stringify(renderResult(await cmdAdd(inv), conf.cniVersion));
    }
    case "DEL": {
      const { cmdDel } = await import("./del");
      await cmdDel(inv);
      return undefined;
    }
    case "CHECK": {
      const { cmdCheck } = await import("./check");
      await cmdCheck(inv);
      return undefined;
    }
    case "GC": {
      const { cmdGc } = await import("./gc");
      await cmdGc(inv);
      return undefined;
    }
    case "STATUS": {
      const { cmdStatus } = await import("./status");
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
function logWhereTheConfigSays(stdin: Buffer, processEnv: NodeJS.ProcessEnv): void {
  try {
    const conf = parseNetConf(stdin);
    log.configure(conf.logFile, conf.logLevel);
    const { CNI_COMMAND = "", CNI_CONTAINERID = "", CNI_IFNAME = "" } = processEnv;
    log.setContext(`${CNI_COMMAND} ${CNI_CONTAINERID}/${CNI_IFNAME} `);
  } catch {
    // No config to read: nowhere to log.
  }
}
