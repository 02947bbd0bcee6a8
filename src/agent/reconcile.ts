/**
 * The agent's story, run on every change of the node list and every resync: from the
 * API's nodes and this node's kernel, compute what should be and apply the difference.
 *
 *   1. this node's pod CIDRs (waits until the API has them)
 *   2. the conflist, as `netkit-cni install` writes it (the executable too, the first time)
 *   3. the routes to every other node's pod CIDRs (routes.ts), reporting the nodes it
 *      cannot route
 *   4. masquerade (masquerade.ts), unless someone else does it
 *   5. once 2 and 3 are done for a complete node list: the `synced` note STATUS waits for
 *
 * Reconcile, don't replay: nothing depends on which events came, only on what the
 * nodes are now. Runs are serialized; a request during a run makes one more run after it.
 */
import * as fs from "node:fs";
import type { V1Node } from "@kubernetes/client-node";
import { install } from "../cli/install";
import { AF_INET } from "../cni/address";
import { type SyncNote, syncedFile } from "../commands/agent-state";
import type { RtnlSocket } from "../netlink/socket";
import { agentLog } from "./log";
import {
  applyMasquerade,
  currentMasquerade,
  MASQUERADE_TABLE,
  masqueradeRuleset,
  removeMasquerade,
} from "./masquerade";
import type { AgentMetrics } from "./metrics";
import { type NodeFacts, nodeFacts } from "./node-facts";
import { type AgentOptions, installOptionsFor } from "./options";
import { planRoutes, type RoutePlan } from "./route-plan";
import { connectedRoutes, syncRoutes } from "./routes";
import type { ServiceSyncStatus } from "./services";

export interface AgentStatus {
  node: string;
  /** The conflist and the routes of a complete node list are written (STATUS is ready). */
  synced: boolean;
  /** What the agent waits for, when it cannot go on. */
  waiting: string | undefined;
  podCidrs: string[];
  conflist: string | undefined;
  routes: number;
  peers: RoutePlan["peers"];
  masquerade: "on" | "off";
  /** The last failed step and why; cleared by a run without failures. */
  errors: string[];
  /** Nodes the API sent that the agent could not read (no name), and malformed fields. */
  skipped: string[];
  lastRun: string | undefined;
  /** With --service-translation: the Service tables' sync (services.ts). */
  services?: ServiceSyncStatus;
}

export class Reconciler {
  readonly status: AgentStatus;
  private nodes: V1Node[] = [];
  private complete = false;
  private running: Promise<void> | undefined;
  private again = false;
  private binaryInstalled = false;
  private lastRuleset: string | undefined;

  constructor(
    private readonly opts: AgentOptions,
    private readonly host: RtnlSocket,
    private readonly metrics: AgentMetrics,
  ) {
    this.status = {
      node: opts.nodeName,
      synced: false,
      waiting: `the first list of nodes`,
      podCidrs: [],
      conflist: undefined,
      routes: 0,
      peers: [],
      masquerade: opts.masquerade ? "on" : "off",
      errors: [],
      skipped: [],
      lastRun: undefined,
    };
  }

  /** The current nodes; `complete`: they come from a finished list (every node is known). */
  update(nodes: V1Node[], complete: boolean): void {
    this.nodes = nodes;
    this.complete ||= complete;
    // Before the first complete list the informer holds only the nodes it has read so
    // far: a run then would delete the routes of those it has not (a restarted agent).
    if (this.complete) this.request();
  }

  /** One more run (a resync, or a change). */
  request(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.run().finally(() => {
      this.running = undefined;
      if (this.again) {
        this.again = false;
        this.request();
      }
    });
  }

  /** Resolves when no run is under way or asked for. */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  private async run(): Promise<void> {
    const errors: string[] = [];
    const failed = (step: string, e: unknown) => {
      const message = `${step}: ${(e as Error).message}`;
      errors.push(message);
      this.metrics.syncErrors.inc({ step });
      agentLog.error(message);
    };
    try {
      await this.steps(failed);
    } catch (e) {
      failed("reconcile", e);
    }
    this.status.errors = errors;
    this.status.lastRun = new Date().toISOString();
  }

  private async steps(failed: (step: string, e: unknown) => void): Promise<void> {
    const facts: NodeFacts[] = [];
    const skipped: string[] = [];
    for (const n of this.nodes) {
      const f = nodeFacts(n);
      if (!f) {
        skipped.push("a node without a name");
        continue;
      }
      facts.push(f);
      for (const p of f.problems) skipped.push(`node ${f.name}: ${p}`);
    }
    for (const s of skipped) agentLog.warn(`skipped: ${s}`);
    this.status.skipped = skipped;

    this.masquerade(failed);
    if (!this.complete) return; // the first list is not in yet (status.waiting says so)

    // 1. This node's pod CIDRs.
    const self = facts.find((f) => f.name === this.opts.nodeName);
    if (!self || self.podCidrs.length === 0) {
      this.status.waiting = !self
        ? `node ${this.opts.nodeName} is not in the API`
        : `node ${this.opts.nodeName} has no spec.podCIDRs yet`;
      agentLog.info(`waiting for ${this.status.waiting}`);
      return;
    }
    this.status.waiting = undefined;
    const podCidrs = self.podCidrs.map((c) => c.text);
    if (podCidrs.join() !== this.status.podCidrs.join())
      agentLog.info(`node ${self.name}: pod CIDRs ${podCidrs.join(", ")}`);
    this.status.podCidrs = podCidrs;

    // 2. The conflist (and the executable, once).
    let conflistOk = false;
    try {
      const installOpts = installOptionsFor(this.opts, podCidrs);
      if (this.binaryInstalled) installOpts.skipBinary = true;
      const report = install(installOpts);
      this.binaryInstalled = true;
      this.status.conflist = report.conflist.path;
      if (report.binary.action !== "unchanged" && report.binary.action !== "skipped") {
        agentLog.info(`${report.binary.action} ${report.binary.path}`);
      }
      if (report.conflist.action !== "unchanged") agentLog.info(`${report.conflist.action} ${report.conflist.path}`);
      for (const w of report.warnings) agentLog.warn(w);
      conflistOk = true;
    } catch (e) {
      failed("conflist", e);
    }

    // 3. Routes to the other nodes' pods.
    let routesOk = false;
    try {
      const others = facts.filter((f) => f !== self);
      const plan = planRoutes(self, others, await connectedRoutes(this.host));
      const sync = await syncRoutes(this.host, plan.routes);
      for (const r of sync.added) agentLog.info(`route added: ${r}`);
      for (const r of sync.replaced) agentLog.info(`route replaced: ${r}`);
      for (const r of sync.deleted) agentLog.info(`route deleted: ${r}`);
      for (const b of sync.blocked) {
        const why = `route to ${b.dst} not made: a route not made by the agent has that destination`;
        const peer = plan.peers.find((p) => p.node === b.node);
        if (peer) {
          peer.state = "conflict";
          peer.why.push(why);
        }
      }
      for (const p of plan.peers)
        if (p.state !== "routed") agentLog.warn(`node ${p.node} not routed (${p.state}): ${p.why.join("; ")}`);
      this.status.routes = sync.ours;
      this.status.peers = plan.peers;
      const v4 = plan.routes.filter((r) => r.family === AF_INET).length;
      this.metrics.setPeers(plan.peers, { v4, v6: plan.routes.length - v4 });
      routesOk = true;
    } catch (e) {
      failed("routes", e);
    }

    // 5. Ready for pods.
    if (conflistOk && routesOk && this.complete && !this.status.synced) {
      const note: SyncNote = { node: self.name, podCidrs, routes: this.status.routes, at: new Date().toISOString() };
      try {
        fs.mkdirSync(this.opts.stateDir, { recursive: true });
        fs.writeFileSync(syncedFile(this.opts.stateDir), `${JSON.stringify(note)}\n`);
        this.status.synced = true;
        this.metrics.synced.set(1);
        agentLog.info(`synced: conflist written, ${note.routes} routes to other nodes`);
      } catch (e) {
        failed("synced", e);
      }
    }
  }

  /** 4. Masquerade: the table written when its text changes or it went missing. */
  private masquerade(failed: (step: string, e: unknown) => void): void {
    try {
      if (!this.opts.masquerade) {
        if (this.lastRuleset === undefined && currentMasquerade() !== undefined) {
          removeMasquerade();
          agentLog.info(`masquerade off: removed table inet ${MASQUERADE_TABLE}`);
        }
        this.lastRuleset = "";
        return;
      }
      const ruleset = masqueradeRuleset(this.opts.clusterCidrs, this.opts.noMasqueradeCidrs);
      if (ruleset === this.lastRuleset && currentMasquerade() !== undefined) return;
      applyMasquerade(ruleset);
      if (this.lastRuleset === undefined) agentLog.info(`masquerade on: table inet ${MASQUERADE_TABLE}`);
      this.lastRuleset = ruleset;
    } catch (e) {
      failed("masquerade", e);
    }
  }
}
