/**
 * The plugin's side of handing a verb to the node's agent (protocol.ts). It asks only
 * where a conflist names the agent's state directory and the agent listens there, and it
 * falls back to doing the verb itself (returns undefined) whenever the agent cannot be
 * reached, declines, or has not given the verb its turn within TURN_WAIT_MS. Once it has
 * said `go`, the verb is the agent's: an agent that ends before answering is reported as
 * "try again later", as a plugin killed mid-verb would leave it to the runtime's retry.
 */
import type { NetConf } from "../../cni/config";
import { CniError, ErrorCode, renderError } from "../../cni/errors";
import type { Outcome } from "../../commands/invoke";
import { identify } from "../../sys/file-identity";
import {
  cniVariables,
  filesOfVerb,
  GO,
  HANDED_VERBS,
  PROTOCOL_VERSION,
  parseAnswer,
  type VerbRequest,
  verbSocketPath,
} from "./protocol";

/** How long a plugin waits in the agent's queue before doing the verb itself. */
const TURN_WAIT_MS = 5_000;

/** Test-only failure injection names this process's steps; the agent cannot honour them. */
const FAILPOINT_VARIABLES = ["NETKIT_CNI_PAUSE_AT", "NETKIT_CNI_FAIL_AT"];

/** The request for this verb, or undefined when it is not one to hand over. */
export function requestFor(conf: NetConf, stdin: Buffer, env: NodeJS.ProcessEnv): VerbRequest | undefined {
  if (!conf.agentStateDir) return undefined;
  if (!(HANDED_VERBS as readonly string[]).includes(env.CNI_COMMAND ?? "")) return undefined;
  if (FAILPOINT_VARIABLES.some((v) => env[v])) return undefined;
  const files = filesOfVerb(conf, env.CNI_NETNS ?? "");
  if (!files) return undefined;
  try {
    return {
      version: PROTOCOL_VERSION,
      env: cniVariables(env),
      stdin: stdin.toString("utf8"),
      files: files.map(identify),
    };
  } catch {
    return undefined; // a path we cannot even stat: the verb itself will say why
  }
}

/** The agent's outcome of the verb, or undefined: do it here. */
export function handToAgent(conf: NetConf, stdin: Buffer, env: NodeJS.ProcessEnv): Promise<Outcome | undefined> {
  const request = conf.agentStateDir ? requestFor(conf, stdin, env) : undefined;
  if (!request || !conf.agentStateDir) return Promise.resolve(undefined);
  const socketPath = verbSocketPath(conf.agentStateDir);
  return new Promise((resolve) => {
    let committed = false;
    let settled = false;
    let buffered = "";
    // Required here, not imported: the executable's one ES-module bundle would load
    // node:net (and its streams) at every start, for every verb and every command.
    const net: typeof import("node:net") = require("node:net");
    const sock = net.createConnection(socketPath);
    const finish = (outcome: Outcome | undefined) => {
      if (settled) return;
      settled = true;
      clearTimeout(turnTimer);
      sock.destroy();
      resolve(outcome);
    };
    const agentEnded = () => {
      if (!committed) return finish(undefined);
      const err = new CniError(ErrorCode.TryAgainLater, "the node's agent ended before finishing the verb; try again");
      finish({ stdout: `${JSON.stringify(renderError(err, conf.cniVersion))}\n`, exitCode: 1 });
    };
    const turnTimer = setTimeout(() => finish(undefined), TURN_WAIT_MS);
    sock.on("error", agentEnded);
    sock.on("close", agentEnded);
    sock.on("connect", () => sock.write(`${JSON.stringify(request)}\n`));
    sock.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        let answer: ReturnType<typeof parseAnswer>;
        try {
          answer = parseAnswer(line);
        } catch {
          return agentEnded();
        }
        if ("turn" in answer) {
          if (committed) continue;
          committed = true;
          clearTimeout(turnTimer);
          sock.write(GO);
        } else if ("declined" in answer) {
          return committed ? agentEnded() : finish(undefined);
        } else {
          return finish(answer);
        }
      }
    });
  });
}
