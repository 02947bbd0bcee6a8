/**
 * Where a verb's time goes when the conflist is the agent's: the process that did the verb
 * (the agent, or the plugin itself when no agent answers) records how long the verb took
 * inside it in the state directory's verbs.log (src/commands/agent-state.ts). Beside the
 * runtime's wall time of the same verbs, the rest is the plugin's start and exit and, for a
 * handed verb, the hand-over.
 */
import { VerbLog } from "../../src/agent/verb-log";
import type { CpConfig, CpId } from "./control-plane";
import { type Summary, summarize } from "./stats";

/** The configurations whose verbs leave their time in verbs.log. */
export const TIMED_IN_PROCESS: readonly CpId[] = ["ours-agent", "ours-agent-stopped", "ours-agent-tc"];

export interface InProcessTimes {
  add: Summary;
  del: Summary;
}

/**
 * The ADDs' and DELs' times recorded so far in `cfg`'s verbs.log, the first `warmup` of
 * each left out (as measureCycles leaves them out of the wall times).
 */
export function inProcessTimes(cfg: CpConfig, warmup: number): InProcessTimes | undefined {
  const dir = cfg.conf.agentStateDir;
  if (typeof dir !== "string") return undefined;
  const timings = new VerbLog(dir).read();
  const of = (verb: string) =>
    timings
      .filter((t) => t.verb === verb && t.ok)
      .slice(warmup)
      .map((t) => t.seconds * 1000);
  return { add: summarize(of("ADD")), del: summarize(of("DEL")) };
}
