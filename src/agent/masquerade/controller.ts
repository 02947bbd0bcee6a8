/**
 * The masquerade controller: the agent's nftables table (table.ts) as the flags say,
 * checked at start and at every resync, never on an API event (nothing of the API goes
 * into it). The table is written when its text changes or someone removed it.
 */
import type { WorkQueue } from "../kube/workqueue";
import { agentLog } from "../log";
import type { AgentOptions } from "../options";

export const MASQUERADE = "masquerade";

/** What the controller needs of nftables (tests give it a fake). */
export interface MasqueradeTable {
  /** The table's text as the kernel lists it; undefined when there is none. */
  current(): string | undefined;
  apply(ruleset: string): void;
  remove(): void;
}

export class MasqueradeController {
  private lastRuleset: string | undefined;

  constructor(
    private readonly queue: WorkQueue,
    private readonly opts: Pick<AgentOptions, "masquerade" | "clusterCidrs" | "noMasqueradeCidrs">,
    private readonly table: MasqueradeTable,
    private readonly ruleset: (clusterCidrs: string[], noMasqueradeCidrs: string[]) => string,
    private readonly tableName: string,
  ) {
    queue.register(MASQUERADE, () => this.sync());
  }

  get state(): "on" | "off" {
    return this.opts.masquerade ? "on" : "off";
  }

  resync(): void {
    this.queue.add(MASQUERADE, "");
  }

  private sync(): void {
    if (!this.opts.masquerade) {
      if (this.lastRuleset === undefined && this.table.current() !== undefined) {
        this.table.remove();
        agentLog.info(`masquerade off: removed table inet ${this.tableName}`);
      }
      this.lastRuleset = "";
      return;
    }
    const ruleset = this.ruleset(this.opts.clusterCidrs, this.opts.noMasqueradeCidrs);
    if (ruleset === this.lastRuleset && this.table.current() !== undefined) return;
    this.table.apply(ruleset);
    if (this.lastRuleset === undefined) agentLog.info(`masquerade on: table inet ${this.tableName}`);
    this.lastRuleset = ruleset;
  }
}
