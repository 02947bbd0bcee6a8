/**
 * The plugin's side of handing a verb to the node's agent (protocol.ts). It asks only
 * where a conflist names the agent's state directory and the agent listens there, and it
 * falls back to doing the verb itself (returns undefined) whenever the agent cannot be
 * reached, declines, or has not given the verb its turn within TURN_WAIT_MS. Once it has
 * said `go`, the verb is the agent's: an agent that ends before answering is reported as
 * "try again later", as a plugin killed mid-verb would leave it to the runtime's retry.
 */
import { CniError, ErrorCode, renderError } from "../../cni/errors";
import type { Outcome } from "../../commands/invoke";
import { identify } from "../../sys/file-identity";
import { UnixStream, UnixStreamTimeout } from "../../sys/unix-stream";
import {
  cniVariables,
  filesOfVerb,
  GO,
  HANDED_VERBS,
  type HandOverConf,
  PROTOCOL_VERSION,
  parseAnswer,
  type VerbRequest,
  verbSocketPath,
} from "./protocol";

/** How long a plugin waits in the agent's queue before doing the verb itself. */
const TURN_WAIT_MS = 5_000;

const NEWLINE = 0x0a;

/** Test-only failure injection names this process's steps; the agent cannot honour them. */
const FAILPOINT_VARIABLES = ["NETKIT_CNI_PAUSE_AT", "NETKIT_CNI_FAIL_AT"];

/** The request for this verb, or undefined when it is not one to hand over. */
export function requestFor(conf: HandOverConf, stdin: Buffer, env: NodeJS.ProcessEnv): VerbRequest | undefined {
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

/**
 * The agent's outcome of the verb, or undefined: do it here. Synchronous, over a plain
 * descriptor (sys/unix-stream.ts): the process has nothing else to do while the agent
 * works, and node:net cost every handed verb more to load than the exchange itself.
 */
export function handToAgent(
  conf: HandOverConf,
  stdin: Buffer,
  env: NodeJS.ProcessEnv,
  turnWaitMs = TURN_WAIT_MS,
): Outcome | undefined {
  const request = requestFor(conf, stdin, env);
  if (!request || !conf.agentStateDir) return undefined;
  let stream: UnixStream;
  try {
    stream = UnixStream.connect(verbSocketPath(conf.agentStateDir));
  } catch {
    return undefined; // no agent listening: the verb is this process's
  }
  try {
    return converse(stream, request, conf, turnWaitMs);
  } finally {
    stream.close();
  }
}

/**
 * The request, then the agent's lines: `turn` (answered `go`, after which the verb is the
 * agent's), `declined`, or the outcome. Until `go`, anything amiss leaves the verb here;
 * after it, an agent that ends without the outcome is "try again later".
 */
function converse(
  stream: UnixStream,
  request: VerbRequest,
  conf: HandOverConf,
  turnWaitMs: number,
): Outcome | undefined {
  const turnBy = Date.now() + turnWaitMs;
  let committed = false;
  const agentEnded = (): Outcome | undefined => {
    if (!committed) return undefined;
    const err = new CniError(ErrorCode.TryAgainLater, "the node's agent ended before finishing the verb; try again");
    return { stdout: `${JSON.stringify(renderError(err, conf.cniVersion))}\n`, exitCode: 1 };
  };
  // Bytes until a whole line is in: a character may straddle two reads, a newline never
  // is part of one.
  let buffered = Buffer.alloc(0);
  try {
    stream.send(Buffer.from(`${JSON.stringify(request)}\n`, "utf8"));
    for (;;) {
      const nl = buffered.indexOf(NEWLINE);
      if (nl < 0) {
        const chunk = stream.receive(committed ? -1 : Math.max(0, turnBy - Date.now()));
        if (chunk === undefined) return agentEnded();
        buffered = Buffer.concat([buffered, chunk]);
        continue;
      }
      const answer = parseAnswer(buffered.subarray(0, nl).toString("utf8"));
      buffered = buffered.subarray(nl + 1);
      if ("turn" in answer) {
        if (committed) continue;
        committed = true;
        stream.send(Buffer.from(GO, "utf8"));
      } else if ("declined" in answer) {
        return agentEnded();
      } else {
        return answer;
      }
    }
  } catch (e) {
    // Not given its turn in time: the verb is done here, and the agent, finding the
    // socket closed when the turn comes, skips it.
    if (e instanceof UnixStreamTimeout) return undefined;
    return agentEnded(); // a reset, a line that does not parse
  }
}
