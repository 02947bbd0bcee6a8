/**
 * `netkit-cni agent`: the node's side of a cluster network, a long-running process (the
 * DaemonSet's main container). One controller per concern, as kindnet and client-go
 * controllers are built, each driven by its informers through one shared work queue
 * (kube/workqueue.ts):
 *
 *   conflist    this node's conflist and readiness (conflist.ts)
 *   routes      routes to the other nodes' pod CIDRs (routes/)
 *   masquerade  the agent's nftables table (masquerade/)
 *   services    the Service tables, with --service-translation (services/)
 *   policy      NetworkPolicy per local pod, unless --network-policy=false (policy/)
 *   wireguard   peers on the node's WireGuard device, with --encryption (wireguard/)
 *
 * With --flows, the flow records of what the policies judged are read, kept, served on
 * /flows and exported (flows/).
 *
 * An event syncs the key that changed (one Node, one Service); every --resync-seconds
 * each controller reconciles everything once more, the safety net. It serves metrics and
 * health (server.ts) and is never in the packet path: the plugin and the datapath work
 * without it, and what it made stays when it stops (SIGTERM leaves routes, masquerade
 * and the conflist for the next agent to take over).
 *
 * Built as a bundle of its own and loaded only by this command (cli/agent.ts): the API
 * client and metrics library are start-up cost no plugin verb should pay.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import type { KubeConfig } from "@kubernetes/client-node";
import { keepNodeObjectsOpen, SocketCloser } from "../bpf/index";
import { DEFAULT_BPFFS_ROOT } from "../cni/defaults";
import { embeddedObjects, embeddedSvcDestroyObject, embeddedSvcObject } from "../datapath/assets";
import { deleteRetiredDevices } from "../datapath/retired";
import { WIREGUARD_DEVICE } from "../datapath/uplink";
import { install } from "../install/install";
import { RtnlSocket } from "../netlink/socket";
import { ConflistController } from "./conflist";
import { FlowRecorder } from "./flows/recorder";
import { ApiInformer, type InformerObserver } from "./kube/informer";
import { nodeObject, serviceObject, sliceObject } from "./kube/objects";
import { OptionalInformer } from "./kube/optional-informer";
import { applyPatch, loadKubeConfig, servedVersions } from "./kube/transport";
import { WorkQueue } from "./kube/workqueue";
import { agentLog } from "./log";
import { MasqueradeController } from "./masquerade/controller";
import {
  applyMasquerade,
  currentMasquerade,
  MASQUERADE_TABLE,
  masqueradeRuleset,
  removeMasquerade,
} from "./masquerade/table";
import { AgentMetrics } from "./metrics";
import { AGENT_USAGE, type AgentOptions, AgentUsageError, installOptionsFor, parseAgentOptions } from "./options";
import { ClusterPolicyConditions, firstByName } from "./policy/cluster-conditions";
import { type ClusterPolicySources, PolicyController } from "./policy/controller";
import {
  clusterNetworkPolicyObject,
  type KeptClusterPolicy,
  namespaceObject,
  networkPolicyObject,
  podObject,
  nodeObject as policyNodeObject,
} from "./policy/model/objects";
import { forgetNetworkPolicy, KernelPolicyWriter, writePolicyFile, writePolicyProblemsFile } from "./policy/writer";
import { ROUTES, RoutesController } from "./routes/controller";
import { KernelRouteTable } from "./routes/table";
import { boundPort, serve } from "./server";
import { ServicesController } from "./services/controller";
import { kernelServiceTables } from "./services/tables";
import { VerbServer } from "./verbs/server";
import { WireguardController } from "./wireguard/controller";
import { type EncryptionStart, removeWireguard, startEncryption } from "./wireguard/device";
import { publishNodeKey, registerWireguardMetrics } from "./wireguard/metrics";

/** Bun's collector: `full` collects now, else it is asked to soon. Nothing under Node. */
const bunGc = (full: boolean) => (globalThis as { Bun?: { gc(force: boolean): void } }).Bun?.gc(full);

/** The loop must get a turn at least this often, or /healthz says it is wedged. */
const WEDGED_AFTER_MS = 30_000;
/** How often the agent deletes pairs a deferred DEL retired (datapath/retired.ts). */
const RETIRED_SWEEP_MS = 5_000;

export async function runAgent(argv: string[]): Promise<number> {
  if (argv.includes("--help")) {
    process.stdout.write(`${AGENT_USAGE}\n`);
    return 0;
  }
  let opts: AgentOptions;
  try {
    opts = parseAgentOptions(argv, process.env, os.hostname());
  } catch (e) {
    if (!(e instanceof AgentUsageError)) throw e;
    process.stderr.write(`netkit-cni agent: ${e.message}\n`);
    return 2;
  }
  fs.mkdirSync(opts.stateDir, { recursive: true, mode: 0o755 });
  const bpffsRoot = installOptionsFor(opts, ["192.0.2.0/24"]).generate.bpffsRoot ?? DEFAULT_BPFFS_ROOT;
  // Refused before anything starts: the agent runs as asked or not at all.
  const closer = opts.serviceTranslation ? loadSocketCloser() : undefined;
  if (closer instanceof Error) {
    process.stderr.write(`netkit-cni agent: ${closer.message}\n`);
    return 2;
  }
  const encryption = opts.encryption === "wireguard" ? await startEncryption(opts) : undefined;
  if (encryption instanceof Error) {
    process.stderr.write(`netkit-cni agent: ${encryption.message}\n`);
    return 2;
  }
  opts.podMtu = encryption?.podMtu;
  const kc = loadKubeConfig(opts.kubeconfig, process.env);
  if (!encryption) await stopEncrypting(opts, kc, bpffsRoot);
  if (!opts.networkPolicy) {
    const pods = forgetNetworkPolicy(bpffsRoot, opts.stateDir);
    if (pods > 0) agentLog.info(`network policy off: the policies of ${pods} pods forgotten`);
  }
  const agent = new Agent(opts, kc, bpffsRoot, closer, encryption);
  const server = await serve(
    opts.metricsAddress,
    agent.metrics,
    () => agent.status(),
    () => agent.health(),
    agent.flows?.store,
  );
  agentLog.info(
    `netkit-cni agent on node ${opts.nodeName}: API ${agent.apiServer}, metrics on port ${boundPort(server)}`,
  );
  agent.start();
  // The verbs done here open the node's programs and maps once, not once each (bpf/kept-pins.ts).
  const kept = opts.serveVerbs ? keepNodeObjectsOpen() : undefined;
  const verbs = opts.serveVerbs ? await VerbServer.listen(opts.stateDir, agent.metrics.verbCounts()) : undefined;

  // SIGTERM (a rolling update, a node drain): stop watching and serving, leave what was
  // made. The next agent reconciles from there.
  await new Promise<void>((resolve) => {
    for (const signal of ["SIGTERM", "SIGINT"] as const) process.once(signal, () => resolve());
  });
  agentLog.info("stopping; routes, masquerade and the conflist stay");
  server.closeAllConnections();
  server.close();
  await verbs?.close();
  kept?.close();
  await agent.stop();
  // Done: keep-alive sockets or a watch being torn down must not hold the process past
  // its grace period.
  process.exit(0);
}

/**
 * Without closing a withdrawn backend's sockets, clients would stick to it: a kernel that
 * cannot (Linux 6.5+, BTF and a JIT) is refused --service-translation, saying why.
 */
function loadSocketCloser(): SocketCloser | Error {
  try {
    return SocketCloser.load(embeddedSvcDestroyObject());
  } catch (e) {
    return new Error(
      `--service-translation needs the kernel to close sockets of withdrawn backends (bpf_sock_destroy, Linux 6.5+, with BTF and a BPF JIT): ${(e as Error).message.split("\n")[0]}`,
    );
  }
}

/**
 * Encryption turned off on a node that had it: the device goes (and with it the routes
 * steering other nodes' pods through it), and the node's key is withdrawn from its Node,
 * so that the other agents stop encrypting to a node that can no longer decrypt (strict
 * ones report it keyless; the others talk to it in clear).
 */
async function stopEncrypting(opts: AgentOptions, kc: KubeConfig, bpffsRoot: string): Promise<void> {
  if (!(await removeWireguard(bpffsRoot))) return;
  agentLog.info(`encryption off: ${WIREGUARD_DEVICE} removed, with its routes and programs`);
  try {
    await publishNodeKey(kc, opts.nodeName, null);
    agentLog.info(`encryption off: this node's WireGuard key withdrawn from node ${opts.nodeName}`);
  } catch (e) {
    agentLog.warn(`encryption off: could not withdraw this node's WireGuard key: ${(e as Error).message}`);
  }
}

/** The controllers, their informers and queue, wired. */
class Agent {
  readonly metrics: AgentMetrics;
  private readonly queue: WorkQueue;
  private readonly informers: { start(): void; stop(): void }[] = [];
  private readonly errors = new Map<string, string>();
  private readonly host = RtnlSocket.open();
  private readonly conflist: ConflistController;
  private readonly routes: RoutesController;
  private readonly masquerade: MasqueradeController;
  private readonly services: ServicesController | undefined;
  private readonly policy: PolicyController | undefined;
  private readonly wireguard: WireguardController | undefined;
  /** --flows: the flow records' reader and store. */
  readonly flows: FlowRecorder | undefined;
  private policyWriter: KernelPolicyWriter | undefined;
  private policyFileText = "";
  private policyProblemsText = "";
  private lastTick = Date.now();
  private compactPending = false;
  private timers: NodeJS.Timeout[] = [];
  private sweeping = false;

  constructor(
    private readonly opts: AgentOptions,
    private readonly kc: KubeConfig,
    bpffsRoot: string,
    closer: SocketCloser | undefined,
    private readonly encryption?: EncryptionStart,
  ) {
    this.metrics = new AgentMetrics(bpffsRoot, opts.stateDir);
    this.queue = new WorkQueue({
      failed: (kind, name, e, retryInMs) => {
        this.errors.set(`${kind} ${name}`, e.message);
        this.metrics.syncErrors.inc({ step: kind });
        agentLog.error(`${kind}${name && name !== "*" ? ` ${name}` : ""}: ${e.message}; retrying in ${retryInMs} ms`);
      },
      synced: (kind, name, ms) => {
        this.errors.delete(`${kind} ${name}`);
        this.metrics.syncSeconds.observe({ controller: kind }, ms / 1000);
        if (name === "*") this.compactSoon();
      },
    });
    const nodes = this.informer("/api/v1/nodes", nodeObject, "nodes");
    if (encryption) {
      const { kernel, podMtu, publicKey } = encryption;
      const wgOpts = {
        self: opts.nodeName,
        publicKey,
        strict: opts.encryptionStrict,
        podMtu,
        device: WIREGUARD_DEVICE,
      };
      this.wireguard = new WireguardController(
        this.queue,
        nodes,
        kernel,
        { ...wgOpts, clusterCidrs: opts.clusterCidrs },
        (key) => publishNodeKey(kc, opts.nodeName, key),
        (node) => this.queue.add(ROUTES, node),
      );
      registerWireguardMetrics(this.metrics.registry, this.wireguard);
    }
    this.routes = new RoutesController(
      this.queue,
      nodes,
      new KernelRouteTable(this.host),
      opts.nodeName,
      opts.clusterCidrs,
      {
        peers: (peers, byFamily) => this.metrics.setPeers(peers, byFamily),
        fullSync: () => this.conflist.routesSynced(),
      },
      this.wireguard,
    );
    this.conflist = new ConflistController(this.queue, nodes, this.routes, opts, install, () =>
      this.metrics.synced.set(1),
    );
    this.masquerade = new MasqueradeController(
      this.queue,
      opts,
      { current: currentMasquerade, apply: applyMasquerade, remove: removeMasquerade },
      masqueradeRuleset,
      MASQUERADE_TABLE,
    );
    const services =
      closer || opts.networkPolicy ? this.informer("/api/v1/services", serviceObject, "Services") : undefined;
    if (closer && services) {
      const slices = this.informer("/apis/discovery.k8s.io/v1/endpointslices", sliceObject, "EndpointSlices");
      const tables = kernelServiceTables(bpffsRoot, () => embeddedSvcObject().object, closer);
      this.services = new ServicesController(this.queue, services, slices, opts.nodeName, bpffsRoot, tables);
    }
    if (opts.networkPolicy && services) {
      const writer = new KernelPolicyWriter(bpffsRoot, embeddedObjects().variants.memory.lxc);
      const pods = this.informer("/api/v1/pods", podObject, "Pods");
      const cluster = this.clusterPolicySources(kc, opts.nodeName, nodes);
      const policy = new PolicyController(
        this.queue,
        pods,
        this.informer("/api/v1/namespaces", namespaceObject, "Namespaces"),
        this.informer("/apis/networking.k8s.io/v1/networkpolicies", networkPolicyObject, "NetworkPolicies"),
        services,
        opts.nodeName,
        writer,
        {},
        cluster,
        { watchAll: opts.flows && opts.flowPods === "all" },
      );
      this.policyWriter = writer;
      this.policy = policy;
      this.metrics.watchPolicy(policy);
      this.metrics.watchPolicyVerdicts(() => writer.verdicts());
      if (opts.flows) {
        const sources = { pods, nodes: cluster.nodes, services, rules: policy, events: writer.flowEvents() };
        this.flows = new FlowRecorder(opts, bpffsRoot, sources, this.metrics);
      } else {
        // An agent killed with records on (SIGKILL skips stop) left the programs pushing them.
        writer.flowEvents().record(false);
      }
    }
  }

  /** Which policies select each local pod, and those skipped, for `status` and `monitor`: written when it changed. */
  private writePolicyFile(): void {
    if (!this.policy) return;
    const { pods, problems, clusterNetworkPolicy } = this.policy.status;
    const text = JSON.stringify(pods);
    const problemsText = JSON.stringify([problems, clusterNetworkPolicy]);
    try {
      if (text !== this.policyFileText) {
        writePolicyFile(this.opts.stateDir, pods);
        this.policyFileText = text;
      }
      if (problemsText !== this.policyProblemsText) {
        writePolicyProblemsFile(this.opts.stateDir, problems, clusterNetworkPolicy);
        this.policyProblemsText = problemsText;
      }
    } catch (e) {
      agentLog.warn(`network policy: cannot write ${this.opts.stateDir}: ${(e as Error).message}`);
    }
  }

  /**
   * A full sync of a large cluster leaves the garbage of its lists and plans; under Bun
   * the heap is collected at once after it (synchronously, so the memory is given back
   * before the next list, not at the collector's leisure). Once per burst of full syncs.
   */
  private compactSoon(): void {
    if (this.compactPending) return;
    this.compactPending = true;
    setTimeout(() => {
      this.compactPending = false;
      bunGc(true);
    }, 100);
  }

  get apiServer(): string | undefined {
    return this.kc.getCurrentCluster()?.server;
  }

  /**
   * ClusterNetworkPolicy's sources: the policies in the newest version of
   * policy.networking.k8s.io this agent reads that the API serves (none while the CRD is
   * not installed; discovery read again at every resync, 30 s by default, so installing,
   * upgrading or removing it needs no restart), the Nodes their `nodes` peers select, and their conditions,
   * written by the agent of the node first by name.
   */
  private clusterPolicySources(
    kc: KubeConfig,
    nodeName: string,
    nodes: { values(): IterableIterator<{ name: string }> },
  ): ClusterPolicySources {
    const group = "policy.networking.k8s.io";
    const policies = new OptionalInformer<KeptClusterPolicy>({
      discover: () => servedVersions(kc, group),
      versions: ["v1beta1", "v1alpha2"],
      makeInformer: (version) =>
        new ApiInformer(
          kc,
          `/apis/${group}/${version}/clusternetworkpolicies`,
          clusterNetworkPolicyObject,
          this.informerObserver(`ClusterNetworkPolicies (${version})`),
        ),
      pollMs: this.opts.resyncSeconds * 1000,
      failed: (e) =>
        agentLog.warn(`API: discovery of ${group}: ${e.message}; retrying in ${this.opts.resyncSeconds} s`),
      switched: (version) =>
        agentLog.info(
          version
            ? `ClusterNetworkPolicy: watching ${group}/${version}`
            : `ClusterNetworkPolicy: ${group} is not served (its CRD is not installed): NetworkPolicy only`,
        ),
    });
    this.informers.push(policies);
    const conditions = new ClusterPolicyConditions(
      async (name, condition) => {
        const version = policies.version;
        if (!version) return;
        await applyPatch(
          kc,
          `/apis/${group}/${version}/clusternetworkpolicies/${encodeURIComponent(name)}/status`,
          { apiVersion: `${group}/${version}`, kind: "ClusterNetworkPolicy", status: { conditions: [condition] } },
          "netkit-cni",
        );
      },
      () =>
        firstByName(
          nodeName,
          [...nodes.values()].map((n) => n.name),
        ),
      (name, e) => agentLog.warn(`ClusterNetworkPolicy ${name}: cannot write its status: ${e.message}`),
    );
    return {
      policies,
      nodes: this.informer("/api/v1/nodes", policyNodeObject, "Nodes (for ClusterNetworkPolicy)"),
      version: () => policies.version,
      report: (reports) => conditions.report(reports),
    };
  }

  private informerObserver(what: string): InformerObserver {
    return {
      failed: (e, retryInMs) => {
        this.metrics.apiErrors.inc();
        agentLog.warn(`API: ${what}: ${e.message}; keeping the last known, retrying in ${retryInMs} ms`);
      },
      listed: (n, ms) => agentLog.info(`listed ${n} ${what} in ${Math.round(ms)} ms`),
      // A large list is read a chunk at a time; its garbage is collected as it goes, so
      // the peak stays a chunk's worth above what is kept (Bun; Node collects by itself).
      chunkTaken: () => bunGc(false),
    };
  }

  private informer<T>(path: string, transform: (raw: unknown) => { key: string; object: T } | undefined, what: string) {
    const informer = new ApiInformer<T>(this.kc, path, transform, this.informerObserver(what));
    this.informers.push(informer as ApiInformer<unknown>);
    return informer;
  }

  start(): void {
    for (const i of this.informers) i.start();
    this.flows?.start();
    this.masquerade.resync();
    this.timers.push(
      setInterval(() => {
        this.lastTick = Date.now();
        this.writePolicyFile();
        this.wireguard?.refresh().catch((e) => agentLog.warn(`wireguard: ${(e as Error).message}`));
      }, 1000),
      setInterval(() => this.deleteRetiredDevices(), RETIRED_SWEEP_MS),
      setInterval(() => {
        this.routes.resync();
        this.masquerade.resync();
        this.services?.resync();
        this.policy?.resync();
        this.wireguard?.resync();
      }, this.opts.resyncSeconds * 1000),
    );
  }

  /**
   * Pairs a DEL left retired (datapath/retired.ts) whose pod netns lives on: a pod's
   * teardown usually deletes them first. One sweep at a time.
   */
  private deleteRetiredDevices(): void {
    if (this.sweeping) return;
    this.sweeping = true;
    deleteRetiredDevices(this.host)
      .then((sweep) => {
        this.metrics.retiredDeleted.inc(sweep.deleted.length);
        for (const failure of sweep.failures) agentLog.warn(`retired device: ${failure}`);
      })
      .catch((e) => agentLog.warn(`retired devices: ${(e as Error).message}`))
      .finally(() => {
        this.sweeping = false;
      });
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    for (const i of this.informers) i.stop();
    this.flows?.stop();
    this.queue.stop();
    await this.queue.idle();
    this.services?.close();
    this.policyWriter?.close();
    this.encryption?.close();
    this.host.close();
  }

  health(): string | undefined {
    const quiet = Date.now() - this.lastTick;
    return quiet > WEDGED_AFTER_MS ? `event loop blocked for ${quiet} ms` : undefined;
  }

  status() {
    const routes = this.routes.status;
    return {
      node: this.opts.nodeName,
      ...this.conflist.status,
      routes: routes.routes,
      peers: routes.peers,
      masquerade: this.masquerade.state,
      /** Syncs failing now (retried with backoff), "controller key: why". */
      errors: [...this.errors].map(([key, why]) => `${key}: ${why}`),
      queue: this.queue.length,
      ...(this.services ? { services: this.services.status } : {}),
      ...(this.policy ? { networkPolicy: this.policy.status } : {}),
      ...(this.wireguard ? { encryption: this.wireguard.status } : {}),
      ...(this.flows ? { flows: this.flows.status } : {}),
    };
  }
}
