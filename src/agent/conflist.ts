/**
 * The conflist controller: this node's conflist, from its pod CIDRs, and the node's
 * readiness for pods.
 *
 * - It waits until the API has this node and its spec.podCIDRs (status.waiting says
 *   which), then writes the conflist as `netkit-cni install` does (the executable too,
 *   the first time). Only a change of this node's pod CIDRs syncs it again.
 * - Once the conflist is written and the route controller has synced a complete node
 *   list, it writes the `synced` note STATUS waits for (commands/agent-state.ts).
 * - A pod CIDR of this node outside --cluster-cidr is reported: its pods' traffic would
 *   leave the cluster unmasqueraded, with a source nothing routes back.
 */
import * as fs from "node:fs";
import { parseSubnet } from "../cni/address";
import { type SyncNote, syncedFile } from "../commands/agent-state";
import type { InstallReport } from "../install/install";
import type { InstallOptions } from "../install/options";
import type { Informer } from "./kube/informer";
import type { NodeFacts } from "./kube/node-facts";
import type { WorkQueue } from "./kube/workqueue";
import { agentLog } from "./log";
import { type AgentOptions, installOptionsFor } from "./options";
import { insideCluster } from "./routes/plan";

export const CONFLIST = "conflist";

export interface ConflistStatus {
  /** The conflist and the routes of a complete node list are written (STATUS is ready). */
  synced: boolean;
  /** What the agent waits for, when it cannot go on. */
  waiting: string | undefined;
  podCidrs: string[];
  conflist: string | undefined;
  /** This node's misconfigurations that do not stop it (a pod CIDR outside the cluster's). */
  problems: string[];
}

export interface ReadinessSource {
  readonly synced: boolean;
  /** The routes of a complete node list, as synced; for the note. */
  readonly routeCount: number;
}

export class ConflistController {
  readonly status: ConflistStatus = {
    synced: false,
    waiting: "the first list of nodes",
    podCidrs: [],
    conflist: undefined,
    problems: [],
  };
  private binaryInstalled = false;
  private written: string | undefined;

  constructor(
    private readonly queue: WorkQueue,
    private readonly nodes: Informer<NodeFacts>,
    private readonly routes: ReadinessSource,
    private readonly opts: AgentOptions,
    private readonly install: (opts: InstallOptions) => InstallReport,
    private readonly onSynced: () => void,
  ) {
    queue.register(CONFLIST, () => this.sync());
    nodes.onSynced(() => queue.add(CONFLIST, opts.nodeName));
    nodes.onChange((name, before, after) => {
      if (name !== opts.nodeName) return;
      if (JSON.stringify(before?.podCidrs.map((c) => c.text)) !== JSON.stringify(after?.podCidrs.map((c) => c.text)))
        queue.add(CONFLIST, name);
    });
  }

  /** The route controller finished a full sync: readiness may follow. */
  routesSynced(): void {
    if (!this.status.synced) this.queue.add(CONFLIST, this.opts.nodeName);
  }

  private sync(): void {
    const self = this.nodes.get(this.opts.nodeName);
    if (!self || self.podCidrs.length === 0) {
      const waiting = !self
        ? `node ${this.opts.nodeName} is not in the API`
        : `node ${this.opts.nodeName} has no spec.podCIDRs yet`;
      if (waiting !== this.status.waiting) agentLog.info(`waiting for ${waiting}`);
      this.status.waiting = waiting;
      return;
    }
    this.status.waiting = undefined;
    const podCidrs = self.podCidrs.map((c) => c.text);
    this.status.podCidrs = podCidrs;
    this.checkInsideCluster(self);

    const key = podCidrs.join();
    if (this.written !== key) {
      agentLog.info(`node ${self.name}: pod CIDRs ${podCidrs.join(", ")}`);
      this.writeConflist(podCidrs);
      this.written = key;
    }
    if (!this.status.synced && this.routes.synced) this.writeSyncedNote(self.name, podCidrs);
  }

  private writeConflist(podCidrs: string[]): void {
    const installOpts = installOptionsFor(this.opts, podCidrs);
    if (this.binaryInstalled) installOpts.skipBinary = true;
    const report = this.install(installOpts);
    this.binaryInstalled = true;
    this.status.conflist = report.conflist.path;
    if (report.binary.action !== "unchanged" && report.binary.action !== "skipped") {
      agentLog.info(`${report.binary.action} ${report.binary.path}`);
    }
    if (report.conflist.action !== "unchanged") agentLog.info(`${report.conflist.action} ${report.conflist.path}`);
    for (const w of report.warnings) agentLog.warn(w);
  }

  private writeSyncedNote(node: string, podCidrs: string[]): void {
    const note: SyncNote = { node, podCidrs, routes: this.routes.routeCount, at: new Date().toISOString() };
    fs.mkdirSync(this.opts.stateDir, { recursive: true });
    fs.writeFileSync(syncedFile(this.opts.stateDir), `${JSON.stringify(note)}\n`);
    this.status.synced = true;
    this.onSynced();
    agentLog.info(`synced: conflist written, ${note.routes} routes to other nodes`);
  }

  private checkInsideCluster(self: NodeFacts): void {
    const cluster = this.opts.clusterCidrs.flatMap((c) => {
      const s = parseSubnet(c);
      return s.ok ? [s.subnet] : [];
    });
    const problems = self.podCidrs
      .filter((c) => !insideCluster(c.subnet, cluster))
      .map(
        (c) =>
          `this node's pod CIDR ${c.text} lies outside the cluster CIDRs (--cluster-cidr ${this.opts.clusterCidrs.join(",")}): its pods' traffic leaves the cluster unmasqueraded`,
      );
    if (problems.join() !== this.status.problems.join()) for (const p of problems) agentLog.error(p);
    this.status.problems = problems;
  }
}
