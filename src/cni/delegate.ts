/**
 * Delegation to another CNI plugin (the IPAM plugin named by `ipam.type`), as the spec's
 * "delegated plugin protocol" describes: found in CNI_PATH, run with our environment but
 * its own CNI_COMMAND, given our network configuration on stdin. Its errors come back
 * with their own codes, prefixed with the plugin's name.
 *
 * One compatibility step: plugins built on libcni before 1.1 (e.g. Debian's host-local)
 * refuse cniVersion 1.1.0 although their ADD/DEL/CHECK results are the same as 1.0.0's;
 * we retry those verbs at 1.0.0. GC and STATUS do not exist before 1.1.0, so they are not
 * forwarded to such plugins.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { CniError, ErrorCode } from "./errors";
import { parseResult, type Result } from "./result";
import type { Verb } from "./version";

const EXEC_TIMEOUT_MS = 60_000;

export interface DelegateTarget {
  pluginType: string;
  /** CNI_PATH directories. */
  searchPath: string[];
  /** The network configuration to send (our own stdin, parsed). */
  conf: Record<string, unknown>;
  /** Environment for the plugin; CNI_COMMAND is set per call. */
  env: NodeJS.ProcessEnv;
}

export function findPlugin(pluginType: string, searchPath: string[]): string {
  for (const dir of searchPath) {
    const candidate = path.join(dir, pluginType);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      // Not in this directory; keep looking.
    }
  }
  throw new CniError(
    ErrorCode.InvalidNetworkConfig,
    `failed to find plugin "${pluginType}" in path [${searchPath.join(" ")}]`,
  );
}

interface ExecOutcome {
  ok: boolean;
  stdout: string;
  error?: CniError;
}

function run(target: DelegateTarget, verb: Verb, conf: Record<string, unknown>): ExecOutcome {
  const binary = findPlugin(target.pluginType, target.searchPath);
  // Loaded on first use: most invocations (embedded IPAM, DEL of a pod without one) never
  // exec anything, and node:child_process is one of the costlier built-ins to load.
  const { spawnSync }: typeof import("node:child_process") = require("node:child_process");
  const proc = spawnSync(binary, [], {
    input: JSON.stringify(conf),
    env: { ...target.env, CNI_COMMAND: verb },
    encoding: "utf8",
    timeout: EXEC_TIMEOUT_MS,
    maxBuffer: 4 << 20,
  });
  // EPIPE: the plugin answered without reading all of its input (VERSION needs none) and
  // exited before we finished writing. Its exit status and output still tell the outcome.
  if (proc.error && (proc.error as NodeJS.ErrnoException).code !== "EPIPE") {
    const timedOut = (proc.error as NodeJS.ErrnoException).code === "ETIMEDOUT";
    return {
      ok: false,
      stdout: "",
      error: new CniError(
        timedOut ? ErrorCode.TryAgainLater : ErrorCode.IoFailure,
        `ipam plugin ${target.pluginType} ${verb}: ${timedOut ? "timed out" : proc.error.message}`,
      ),
    };
  }
  if (proc.status === 0) return { ok: true, stdout: proc.stdout };
  return { ok: false, stdout: proc.stdout, error: pluginError(target.pluginType, verb, proc.stdout, proc.stderr) };
}

function pluginError(pluginType: string, verb: Verb, stdout: string, stderr: string): CniError {
  try {
    const parsed = JSON.parse(stdout) as { code?: unknown; msg?: unknown; details?: unknown };
    if (typeof parsed.code === "number" && typeof parsed.msg === "string") {
      return new CniError(
        parsed.code,
        `ipam plugin ${pluginType} ${verb}: ${parsed.msg}`,
        typeof parsed.details === "string" ? parsed.details : undefined,
      );
    }
  } catch {
    // Not the spec's error JSON; fall through with whatever it printed.
  }
  const text = (stdout.trim() || stderr.trim()).slice(0, 500);
  return new CniError(ErrorCode.IpamFailure, `ipam plugin ${pluginType} ${verb} failed`, text || undefined);
}

const isVersionRefusal = (e: CniError | undefined, conf: Record<string, unknown>) =>
  e?.code === ErrorCode.IncompatibleVersion && conf.cniVersion === "1.1.0";

/** Runs a verb, retrying at 1.0.0 for plugins that predate 1.1.0. */
function runCompatible(target: DelegateTarget, verb: Verb): ExecOutcome {
  const first = run(target, verb, target.conf);
  if (first.ok || !isVersionRefusal(first.error, target.conf)) return first;
  return run(target, verb, { ...target.conf, cniVersion: "1.0.0" });
}

export function delegateAdd(target: DelegateTarget): Result {
  const out = runCompatible(target, "ADD");
  if (!out.ok) throw out.error;
  let json: unknown;
  try {
    json = JSON.parse(out.stdout);
  } catch {
    throw new CniError(
      ErrorCode.DecodeFailure,
      `ipam plugin ${target.pluginType} ADD printed a result that is not JSON`,
    );
  }
  return parseResult(json, `ipam plugin ${target.pluginType} result`);
}

export function delegateDel(target: DelegateTarget): void {
  const out = runCompatible(target, "DEL");
  if (!out.ok) throw out.error;
}

export function delegateCheck(target: DelegateTarget): void {
  const out = runCompatible(target, "CHECK");
  if (!out.ok) throw out.error;
}

/** The spec versions a plugin says it supports (its VERSION verb). */
export function pluginVersions(target: DelegateTarget): string[] {
  const out = run(target, "VERSION", { cniVersion: target.conf.cniVersion });
  if (!out.ok) throw out.error;
  try {
    const parsed = JSON.parse(out.stdout) as { supportedVersions?: unknown };
    return Array.isArray(parsed.supportedVersions) ? parsed.supportedVersions.map(String) : [];
  } catch {
    throw new CniError(ErrorCode.DecodeFailure, `ipam plugin ${target.pluginType} VERSION printed no JSON`);
  }
}

/**
 * GC and STATUS: returns false (not forwarded) when the plugin predates spec 1.1.0 and so
 * has no such verb (asking it anyway gets unrelated errors such as "missing containerID");
 * throws its error otherwise.
 */
export function delegateSince110(target: DelegateTarget, verb: "GC" | "STATUS"): boolean {
  if (!pluginVersions(target).includes("1.1.0")) return false;
  const out = run(target, verb, target.conf);
  if (!out.ok) throw out.error;
  return true;
}
