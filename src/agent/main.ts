/**
 * `netkit-cni agent`: the node's side of a cluster network, a long-running process (the
 * DaemonSet's main container). It watches the Nodes, keeps this node's conflist, routes
 * and masquerade as they should be (reconcile.ts), and serves metrics and health
 * (server.ts). It is never in the packet path: the plugin and the datapath work without
 * it, and what it made stays when it stops (SIGTERM leaves routes, masquerade and the
 * conflist for the next agent to take over).
 *
 * Built as a bundle of its own and loaded only by this command (cli/agent.ts): the API
 * client and metrics library are start-up cost no plugin verb should pay.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import { SocketCloser } from "../bpf/index";
import { DEFAULT_BPFFS_ROOT } from "../cni/config";
import { embeddedSvcDestroyObject, embeddedSvcObject } from "../datapath/assets";
import { RtnlSocket } from "../netlink/socket";
import { endpointSliceWatch, loadKubeConfig, NodeWatch, serviceWatch } from "./kube";
import { agentLog } from "./log";
import { AgentMetrics } from "./metrics";
import { AGENT_USAGE, AgentUsageError, installOptionsFor, parseAgentOptions } from "./options";
import { Reconciler } from "./reconcile";
import { boundPort, serve } from "./server";
import { ServiceSync } from "./services";

/** The loop must get a turn at least this often, or /healthz says it is wedged. */
const WEDGED_AFTER_MS = 30_000;

export async function runAgent(argv: string[]): Promise<number> {
  if (argv.includes("--help")) {
    process.stdout.write(`${AGENT_USAGE}\n`);
    return 0;
  }
  let opts: ReturnType<typeof parseAgentOptions>;
  try {
    opts = parseAgentOptions(argv, process.env, os.hostname());
  } catch (e) {
    if (!(e instanceof AgentUsageError)) throw e;
    process.stderr.write(`netkit-cni agent: ${e.message}\n`);
    return 2;
  }
  fs.mkdirSync(opts.stateDir, { recursive: true, mode: 0o755 });
  const bpffsRoot = installOptionsFor(opts, ["192.0.2.0/24"]).generate.bpffsRoot ?? DEFAULT_BPFFS_ROOT;
  const kc = loadKubeConfig(opts.kubeconfig, process.env);
  const host = RtnlSocket.open();
  const metrics = new AgentMetrics(bpffsRoot, opts.stateDir);
  const reconciler = new Reconciler(opts, host, metrics);

  const watch = new NodeWatch(kc, {
    changed: (nodes) => reconciler.update(nodes, false),
    listed: (nodes) => {
      agentLog.info(`listed ${nodes.length} nodes`);
      reconciler.update(nodes, true);
    },
    failed: (e, retryInMs) => {
      metrics.apiErrors.inc();
      agentLog.warn(`API: ${e.message}; keeping the last known nodes, retrying in ${retryInMs} ms`);
    },
  });

  // --service-translation: the Service tables from Services and EndpointSlices.
  let services: ServiceSync | undefined;
  if (opts.serviceTranslation) {
    // Without closing a withdrawn backend's sockets, clients would stick to it: a kernel
    // that cannot (Linux 6.5+, BTF and a JIT) is refused the option, saying why.
    let closer: SocketCloser;
    try {
      closer = SocketCloser.load(embeddedSvcDestroyObject());
    } catch (e) {
      process.stderr.write(
        `netkit-cni agent: --service-translation needs the kernel to close sockets of withdrawn backends (bpf_sock_destroy, Linux 6.5+, with BTF and a BPF JIT): ${(e as Error).message.split("\n")[0]}\n`,
      );
      return 2;
    }
    services = new ServiceSync(bpffsRoot, opts.nodeName, () => embeddedSvcObject().object, closer);
  }
  const serviceWatches: { start(): void; stop(): void }[] = [];
  if (services) {
    const failed = (what: string) => (e: Error, retryInMs: number) => {
      metrics.apiErrors.inc();
      agentLog.warn(`API (${what}): ${e.message}; keeping the last known, retrying in ${retryInMs} ms`);
    };
    serviceWatches.push(
      serviceWatch(kc, {
        changed: (list) => services.servicesChanged(list, false),
        listed: (list) => services.servicesChanged(list, true),
        failed: failed("Services"),
      }),
      endpointSliceWatch(kc, {
        changed: (list) => services.slicesChanged(list, false),
        listed: (list) => services.slicesChanged(list, true),
        failed: failed("EndpointSlices"),
      }),
    );
  }

  let lastTick = Date.now();
  const tick = setInterval(() => {
    lastTick = Date.now();
  }, 1000);
  const healthy = () =>
    Date.now() - lastTick > WEDGED_AFTER_MS ? `event loop blocked for ${Date.now() - lastTick} ms` : undefined;
  const status = () => (services ? { ...reconciler.status, services: services.status } : reconciler.status);
  const server = await serve(opts.metricsAddress, metrics, status, healthy);
  agentLog.info(
    `netkit-cni agent on node ${opts.nodeName}: API ${kc.getCurrentCluster()?.server}, metrics on port ${boundPort(server)}`,
  );

  watch.start();
  for (const w of serviceWatches) w.start();
  const resync = setInterval(() => reconciler.request(), opts.resyncSeconds * 1000);

  // SIGTERM (a rolling update, a node drain): stop watching and serving, leave what was
  // made. The next agent reconciles from there.
  await new Promise<void>((resolve) => {
    for (const signal of ["SIGTERM", "SIGINT"] as const) process.once(signal, () => resolve());
  });
  agentLog.info("stopping; routes, masquerade and the conflist stay");
  clearInterval(resync);
  clearInterval(tick);
  watch.stop();
  for (const w of serviceWatches) w.stop();
  server.closeAllConnections();
  server.close();
  await reconciler.idle();
  host.close();
  // Done: the client library's leftovers (keep-alive sockets, a watch being torn down)
  // must not hold the process past its grace period.
  process.exit(0);
}
