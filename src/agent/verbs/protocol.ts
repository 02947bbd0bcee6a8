/**
 * How a plugin hands its verb to the node's agent: one request and one answer over a unix
 * socket in the agent's state directory, each a line of JSON. Pure: no socket here.
 *
 * The agent does the verb only where it would touch the very files the plugin would: the
 * pod's netns, the IPAM store, the log, the locks and the bpffs. The plugin names each by
 * path with what stat(2) told it (device and inode of the path, or of its nearest existing
 * ancestor and what is missing below it), and the agent declines unless its own view agrees.
 * A declined or unanswered request is done by the plugin itself, the same way.
 */
import * as path from "node:path";
import { DEFAULT_BPFFS_ROOT, DEFAULT_LOG_FILE } from "../../cni/defaults";
import { versionNamed } from "../../cni/version";
import type { FileIdentity } from "../../sys/file-identity";

export const VERBS_SOCKET = "verbs.sock";
export const PROTOCOL_VERSION = 1;

/** The verbs an agent may do for a plugin; GC, STATUS and VERSION stay in the plugin. */
export const HANDED_VERBS = ["ADD", "DEL", "CHECK"] as const;

/** The IPAM type served in-process; a delegated plugin is found in a CNI_PATH the agent does not share. */
const EMBEDDED_IPAM = "netkit-cni";
const DEFAULT_IPAM_DATA_DIR = "/var/lib/cni/networks";
/** Locks and lock queues (attachment, node, coexistence). */
const LOCK_ROOT = "/run/netkit-cni";

export const verbSocketPath = (agentStateDir: string) => path.join(agentStateDir, VERBS_SOCKET);

export interface VerbRequest {
  version: number;
  /** The CNI_* variables the runtime set. */
  env: Record<string, string>;
  /** The network configuration, as the runtime wrote it on stdin. */
  stdin: string;
  files: FileIdentity[];
}

/**
 * The agent's lines: `turn` when the verb's turn has come (the plugin then says `go`, and
 * only then does the agent begin: a plugin that gave up waiting never has its verb done
 * twice), then the outcome; or a refusal at any point before `go`.
 */
export type VerbAnswer = { turn: true } | { declined: string } | { stdout: string; exitCode: number };

export const GO = `${JSON.stringify({ go: true })}\n`;

/** What of a configuration decides the files a verb opens, as NetConf has it. */
export interface VerbFilesConf {
  logFile: string;
  ipam?: { type: string; dataDir?: unknown } | undefined;
  fastPath: { bpffsRoot: string };
}

/** What the plugin needs of its configuration to hand the verb over. */
export interface HandOverConf extends VerbFilesConf {
  agentStateDir: string | undefined;
  /** The version an error of the hand-over itself is written in. */
  cniVersion: string;
}

/**
 * The configuration as the hand-over reads it, from the runtime's bytes, with the
 * defaults the configuration's parser gives (cni/config.ts): the plugin's first step,
 * which must not load the parser and everything it imports for a verb the agent does.
 * The agent parses and judges the whole configuration itself. Undefined for a
 * configuration that names no agent, and where the parser would refuse one of these
 * fields: such a verb is done here, and reports why.
 */
export function handOverConf(stdin: Buffer): HandOverConf | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(stdin.toString("utf8"));
  } catch {
    return undefined;
  }
  if (!isObject(raw)) return undefined;
  const agentStateDir = textField(raw, "agentStateDir");
  const logFile = textField(raw, "logFile", DEFAULT_LOG_FILE);
  const bpffsRoot = textField(raw, "bpffsRoot", DEFAULT_BPFFS_ROOT);
  const { ipam } = raw;
  if (!isAbsolute(agentStateDir) || !isAbsolute(bpffsRoot) || typeof logFile !== "string") return undefined;
  if (ipam !== undefined && ipam !== null && !(isObject(ipam) && typeof ipam.type === "string")) return undefined;
  return {
    agentStateDir,
    logFile,
    ipam: (ipam ?? undefined) as HandOverConf["ipam"],
    fastPath: { bpffsRoot },
    cniVersion: versionNamed(raw.cniVersion),
  };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** A string field; `fallback` when absent or null, null when of another type. */
function textField(raw: Record<string, unknown>, key: string, fallback?: string): string | undefined | null {
  const v = raw[key];
  if (v === undefined || v === null) return fallback;
  return typeof v === "string" ? v : null;
}

/** As the parser requires the configuration's directories: absolute, without "..". */
const isAbsolute = (p: string | undefined | null): p is string =>
  typeof p === "string" && p.startsWith("/") && !p.split("/").includes("..");

/**
 * The files a verb of `conf` opens, by path; undefined when the agent must not do it at all
 * (a delegated IPAM plugin, found through a CNI_PATH the agent's container does not share).
 */
export function filesOfVerb(conf: VerbFilesConf, netns: string): string[] | undefined {
  if (conf.ipam && conf.ipam.type !== EMBEDDED_IPAM) return undefined;
  const dataDir = typeof conf.ipam?.dataDir === "string" ? conf.ipam.dataDir : DEFAULT_IPAM_DATA_DIR;
  const files = [conf.logFile, dataDir, LOCK_ROOT, conf.fastPath.bpffsRoot];
  if (netns !== "") files.push(netns);
  return files;
}

/** Only the runtime's CNI_* variables cross: the agent's own environment stays its own. */
export function cniVariables(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (k.startsWith("CNI_") && v !== undefined) out[k] = v;
  return out;
}

/** Why two views of the files differ, or undefined when they agree in full. */
export function filesDiffer(theirs: FileIdentity[], ours: FileIdentity[]): string | undefined {
  if (theirs.length !== ours.length) return "a different set of files";
  for (let i = 0; i < theirs.length; i++) {
    const [a, b] = [theirs[i], ours[i]];
    if (!a || !b || a.path !== b.path) return "a different set of files";
    if (a.dev !== b.dev || a.ino !== b.ino || a.missing !== b.missing) {
      return `${a.path} is not the same file for the agent`;
    }
  }
  return undefined;
}

export function parseAnswer(line: string): VerbAnswer {
  const v = JSON.parse(line) as Record<string, unknown>;
  if (v.turn === true) return { turn: true };
  if (typeof v.declined === "string") return { declined: v.declined };
  if (typeof v.stdout === "string" && typeof v.exitCode === "number") return { stdout: v.stdout, exitCode: v.exitCode };
  throw new Error(`unreadable answer from the agent: ${line.slice(0, 200)}`);
}

export function parseRequest(line: string): VerbRequest {
  const v = JSON.parse(line) as Partial<VerbRequest>;
  if (v.version !== PROTOCOL_VERSION) throw new Error(`protocol version ${String(v.version)}, not ${PROTOCOL_VERSION}`);
  if (typeof v.stdin !== "string" || typeof v.env !== "object" || v.env === null || !Array.isArray(v.files)) {
    throw new Error("malformed request");
  }
  for (const [k, val] of Object.entries(v.env)) {
    if (!k.startsWith("CNI_") || typeof val !== "string") throw new Error(`variable ${k} is not a runtime's`);
  }
  return v as VerbRequest;
}
