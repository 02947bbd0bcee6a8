/**
 * The files through which `netkit-cni agent` and the plugin talk, in the directory a
 * conflist names as `agentStateDir` (only conflists the agent writes name one):
 *
 *   synced          the agent wrote this node's conflist and the routes of a complete
 *                   node list; until it exists STATUS answers code 50 ("agent not synced")
 *   verbs.log       one line per verb the plugin ran: "<verb> <milliseconds> ok|error"
 *   pods/<hash>     per pod interface: its container id, namespace and name (CNI_ARGS)
 *
 * The plugin writes only what a verb can write without waiting (an append, a small file):
 * it never needs the agent, and a missing or full directory never fails a verb.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { NetConf } from "../cni/config";
import type { CniEnv } from "../cni/env";
import { CniError, ErrorCode } from "../cni/errors";
import { sha256Hex } from "../sys/sha256";

/** Where the agent keeps them unless told otherwise (its --state-dir). */
export const DEFAULT_AGENT_STATE_DIR = "/run/netkit-cni/agent";

export const syncedFile = (dir: string) => path.join(dir, "synced");
export const verbLogFile = (dir: string) => path.join(dir, "verbs.log");
const podsDir = (dir: string) => path.join(dir, "pods");

/** A pod interface's file: hashed, never the container id as is. */
const podFile = (dir: string, containerId: string, ifname: string) =>
  path.join(podsDir(dir), sha256Hex([containerId, "/", ifname], 24));

interface PodName {
  containerId: string;
  ifname: string;
  namespace: string | undefined;
  name: string | undefined;
}

/** What the agent wrote to `synced`. */
export interface SyncNote {
  node: string;
  podCidrs: string[];
  routes: number;
  at: string;
}

/** STATUS: with an agent configured, ready only once it has synced. */
export function requireAgentSynced(conf: NetConf): void {
  if (!conf.agentStateDir) return;
  if (!fs.existsSync(syncedFile(conf.agentStateDir))) {
    throw new CniError(
      ErrorCode.PluginNotAvailable,
      `agent not synced: no routes and conflist from netkit-cni agent yet (${syncedFile(conf.agentStateDir)} is missing)`,
    );
  }
}

/**
 * After a verb: its time for the agent's metrics, and the pod's name for its per-pod
 * ones (ADD) or its removal (DEL). Failures here are the agent's problem, not the verb's.
 */
export function recordVerb(conf: NetConf, env: CniEnv, ms: number, ok: boolean): void {
  const dir = conf.agentStateDir;
  if (!dir) return;
  try {
    fs.appendFileSync(verbLogFile(dir), `${env.command} ${ms.toFixed(3)} ${ok ? "ok" : "error"}\n`);
    if (env.command === "ADD" && ok) {
      const pod: PodName = {
        containerId: env.containerId,
        ifname: env.ifname,
        namespace: env.args.K8S_POD_NAMESPACE,
        name: env.args.K8S_POD_NAME,
      };
      fs.mkdirSync(podsDir(dir), { recursive: true });
      fs.writeFileSync(podFile(dir, env.containerId, env.ifname), JSON.stringify(pod));
    } else if (env.command === "DEL") {
      fs.rmSync(podFile(dir, env.containerId, env.ifname), { force: true });
    }
  } catch {
    // No directory yet (the agent makes it) or no room: the verb's outcome stands.
  }
}

/** Pod names by "<containerId>/<ifname>", from the files ADD left. */
export function podNames(stateDir: string): Map<string, PodName & { file: string }> {
  const out = new Map<string, PodName & { file: string }>();
  let files: string[];
  try {
    files = fs.readdirSync(podsDir(stateDir));
  } catch {
    return out;
  }
  for (const f of files) {
    const file = path.join(podsDir(stateDir), f);
    try {
      const pod = JSON.parse(fs.readFileSync(file, "utf8")) as PodName;
      if (typeof pod.containerId === "string" && typeof pod.ifname === "string") {
        out.set(`${pod.containerId}/${pod.ifname}`, { ...pod, file });
      }
    } catch {
      // Being written, or not ours to read.
    }
  }
  return out;
}
