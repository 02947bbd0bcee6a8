/**
 * ADD: give a pod its network. Reads top to bottom as the pod's story; every step that
 * leaves something behind registers its undo just before it runs (a step can fail
 * half-way, after the kernel made its part), each undo harmless where nothing was made,
 * and any failure unwinds them in reverse, so a failed ADD leaves no device, route, rule,
 * pin, map entry or IP allocation.
 */

import type { EgressEnforcement } from "../bpf/index";
import { namespaceHasPolicies, podKey } from "../bpf/index";
import { AF_INET, canonicalAddress, formatCidr, hostPrefix } from "../cni/address";
import { podBandwidth } from "../cni/bandwidth";
import { podDatapath } from "../cni/config";
import { CniError, ErrorCode } from "../cni/errors";
import type { Result } from "../cni/result";
import { syncNeighbourProxies } from "../datapath/coexist";
import { attachPod, type FastPathEndpoint, removeEndpoint } from "../datapath/fastpath";
import { GATEWAY_V4, GATEWAY_V6 } from "../datapath/gateway";
import { configureHostEnd, enableForwarding } from "../datapath/host-end";
import { chooseDatapath, podEndUsesNeighbours } from "../datapath/index";
import { closeNamespaces, openNamespaces, podNetnsCookie } from "../datapath/namespaces";
import { hostDeviceMac, hostDeviceName, ownerAlias, podDeviceMac } from "../datapath/naming";
import { ensureNodeDatapath, vethEndpoints, withNodeLockAsync } from "../datapath/node-datapath";
import { configurePodEnd, removeSourceRules } from "../datapath/pod-end";
import { switchPodFilters } from "../datapath/pod-filters";
import { shapePodIngress } from "../datapath/pod-shaping";
import { retiredFor } from "../datapath/retired";
import { paceUplink, releasePacing } from "../datapath/shaping";
import type { Endpoint, Namespaces } from "../datapath/types";
import { FALLBACK_MTU, liveIfindexes, requireEncryption, resolveUplink, type Uplink } from "../datapath/uplink";
import { log } from "../log";
import { deleteLink, deleteLinkByName, getLinkByName } from "../netlink/links";
import { failpoint } from "../sys/failpoints";
import { withAttachmentLock } from "./attachment-lock";
import type { Invocation } from "./invocation";
import { requireIpamBackend } from "./ipam-backend";
import { Rollback } from "./rollback";

export async function cmdAdd(inv: Invocation): Promise<Result> {
  // A DEL of this attachment, sent by a runtime that gave up on us, waits until we end.
  return withAttachmentLock(inv.env.containerId, inv.env.ifname, () => addPod(inv));
}

async function addPod(inv: Invocation): Promise<Result> {
  const { env, conf } = inv;
  const ipam = requireIpamBackend(inv);
  const ns = openNamespaces(env.netns);
  const rollback = new Rollback();
  try {
    const hostDevice = hostDeviceName(env.containerId, env.ifname);
    // Refuse before allocating anything: the runtime asked for a name already in use.
    await refuseTakenNames(ns, inv, hostDevice);
    // Its rate limits (code 7 for bad values), checked before anything is made.
    const bandwidth = podBandwidth(conf.bandwidthRequest);
    // The pod's annotation, if the runtime passed one, over the network's datapath.
    const datapath = await chooseDatapath(podDatapath(conf), conf, ns.host);
    const uplink = await resolveUplink(ns.host, conf.fastPath.hostInterface);
    requireEncryption(conf.encryption, uplink);

    // Releasing what was never allocated succeeds; a delegated plugin may allocate and
    // still fail (killed at its timeout, or answering what we cannot read).
    rollback.onFailure("release IP addresses", () => ipam.del());
    const ipamResult = ipam.add();
    const addresses = ipamResult.ips.map((ip) => ip.address);
    if (addresses.length === 0) throw new CniError(ErrorCode.IpamFailure, `${ipam.name} returned no addresses`);
    await failpoint("ipam-allocated");

    const endpoint = podEndpoint(inv, hostDevice, uplink, addresses);
    // Deleting the host end takes the pod end and every route through it along. By name,
    // which is safe whatever the request made: the name is this attachment's, no device
    // had it a moment ago, and no other ADD of the attachment runs meanwhile.
    rollback.onFailure(`delete ${hostDevice}`, () => deleteLinkByName(ns.host, hostDevice).then(() => undefined));
    const pair = await datapath.createPair(ns, endpoint);
    await failpoint("pair-created");

    const resolvesNeighbours = podEndUsesNeighbours(datapath, conf);
    const gatewayMac = resolvesNeighbours ? endpoint.hostMac : undefined;
    // A second interface's source rules live in the pod netns: they outlive the device.
    rollback.onFailure("remove source rules", () => removeSourceRules(ns.pod, pair.podLink.index, addresses));
    const podRoutes = await configurePodEnd(ns.pod, pair.podLink, gatewayMac, addresses);
    await failpoint("pod-configured");
    enableForwarding(addresses);
    await configureHostEnd(ns.host, pair.hostLink, ownerAlias(conf.name, env.containerId, env.ifname), addresses);
    await failpoint("host-configured");

    const fastPath = { kind: datapath.kind, hostIfindex: pair.hostLink.index, resolvesNeighbours, bandwidth };
    await attachPrograms(inv, ns, rollback, uplink, endpoint, fastPath);
    await failpoint("fastpath-attached");

    // Another plugin's pods on a subnet that covers ours (a bridge being replaced on a live
    // node) find this pod by ARP/ND on their device: the node answers there for it. The
    // undo comes first because the step may fail half-way; it leaves this pod's addresses
    // out while its routes still exist.
    const own = addresses.map((a) => canonicalAddress(hostPrefix(a).address) ?? hostPrefix(a).address);
    rollback.onFailure("withdraw neighbour proxies", () => syncNeighbourProxies(ns.host, own));
    await syncNeighbourProxies(ns.host);

    log.info(`added ${datapath.kind} ${hostDevice} <-> ${env.ifname} with ${addresses.join(", ")}`);
    return {
      interfaces: [
        { name: hostDevice, mac: pair.hostLink.mac },
        { name: env.ifname, mac: pair.podLink.mac, mtu: endpoint.mtu, sandbox: env.netns },
      ],
      ips: addresses.map(podIp),
      routes: podRoutes,
      dns: ipamResult.dns,
    };
  } catch (e) {
    await rollback.run();
    throw e;
  } finally {
    closeNamespaces(ns);
  }
}

/**
 * Refuses an interface name the pod already has, or a host device that already exists;
 * but first deletes the pair a DEL of this attachment retired (a runtime that reconnects
 * a live container), which holds both names until it goes.
 */
async function refuseTakenNames(ns: Namespaces, { env, conf }: Invocation, hostDevice: string): Promise<void> {
  const existing = await getLinkByName(ns.host, hostDevice);
  const owner = { network: conf.name, containerId: env.containerId, ifname: env.ifname };
  if (existing && retiredFor(existing, owner)) {
    await deleteLink(ns.host, existing);
    log.info(`deleted ${hostDevice}, retired by this attachment's DEL, to take its names again`);
  } else if (existing) {
    throw new CniError(
      ErrorCode.InvalidEnvironment,
      `host device ${hostDevice} for container ${env.containerId} ${env.ifname} already exists; DEL it first`,
    );
  }
  if (await getLinkByName(ns.pod, env.ifname)) {
    throw new CniError(ErrorCode.InvalidEnvironment, `interface "${env.ifname}" already exists in ${env.netns}`);
  }
}

/** The pod's device pair as the attachment, the config and the uplink make it. */
function podEndpoint({ env, conf }: Invocation, hostDevice: string, uplink: Uplink | undefined, addresses: string[]) {
  return {
    containerId: env.containerId,
    ifname: env.ifname,
    hostDevice,
    hostMac: hostDeviceMac(env.containerId, env.ifname),
    podMac: podDeviceMac(env.containerId, env.ifname),
    mtu: conf.mtu ?? uplink?.mtu ?? FALLBACK_MTU,
    offload: { gsoMaxSize: uplink?.gsoMaxSize, groMaxSize: uplink?.groMaxSize },
    addresses,
  } satisfies Endpoint;
}

/**
 * The pod's programs, after its rate limits have their qdiscs: every pod gets its program
 * (the fast path, or with `"fastPath": false` the source check), and a limited one what
 * enforces its limits.
 */
async function attachPrograms(
  { conf, env }: Invocation,
  ns: Namespaces,
  rollback: Rollback,
  uplink: Uplink | undefined,
  endpoint: Endpoint,
  pod: Pick<FastPathEndpoint, "kind" | "hostIfindex" | "resolvesNeighbours" | "bandwidth">,
): Promise<void> {
  const { hostDevice, addresses } = endpoint;
  if (conf.fastPath.enabled && !uplink) {
    log.warn("no uplink (no hostInterface, no default route): wire traffic reaches pods via the stack");
  }
  // An egress limit is paced by departure times where the uplink can have fq, and
  // policed where it cannot (datapath/shaping.ts).
  let egress: EgressEnforcement | undefined;
  if (pod.bandwidth?.egress && uplink) {
    rollback.onFailure("release uplink pacing", () => releasePacing(ns.host, hostDevice));
    egress = await paceUplink(ns.host, uplink, hostDevice);
  }
  // An ingress limit is paced by departure times through an fq on the pod's host
  // device, or shaped by a tbf there, or policed (datapath/pod-shaping.ts). The qdisc
  // goes with the device, whose undo is registered.
  const ingress = pod.bandwidth?.ingress
    ? await shapePodIngress(ns.host, pod.hostIfindex, pod.bandwidth.ingress, endpoint.mtu)
    : undefined;
  const gone = { hostIfindex: pod.hostIfindex, addresses };
  rollback.onFailure("remove fast path state", () =>
    removeEndpoint(conf.fastPath.bpffsRoot, hostDevice, gone, () => liveIfindexes(ns.host)),
  );
  const settings = { ...conf.fastPath, network: conf.name };
  const { sockBypass, serviceTranslation } = settings;
  const attached: FastPathEndpoint = {
    ...pod,
    hostDevice,
    addresses,
    egress,
    ingress,
    netnsCookie: sockBypass || serviceTranslation ? podNetnsCookie(ns) : undefined,
    policy: settings.networkPolicy ? podPolicy(settings.bpffsRoot, env.args) : undefined,
  };
  // One hold of the node lock for both: the node's datapath (maps, the newest build's
  // programs, every pod moved onto a new build, the uplink's links), then the pod's part
  // on those programs, so no other build swaps them in between.
  await withNodeLockAsync(settings.bpffsRoot, async () => {
    const node = ensureNodeDatapath(settings, uplink);
    try {
      // The pods whose programs are tc filters move onto a new build here: by netlink.
      if (node.loaded && !node.superseded) await switchPodFilters(ns.host, vethEndpoints(node), node.programs);
      await attachPod(ns.host, node, settings, attached);
    } finally {
      node.close();
    }
  });
}

/**
 * The pod as NetworkPolicy knows it: by namespace and name (CNI_ARGS; a runtime that
 * does not pass them wires pods no policy can select). A pod of a namespace that has a
 * policy, which the agent has not judged yet, gets nothing but its node's traffic until
 * it has (bpf/lib/policy.h, PENDING); elsewhere it is not isolated until a policy says.
 */
function podPolicy(root: string, args: Record<string, string>): FastPathEndpoint["policy"] {
  const namespace = args.K8S_POD_NAMESPACE;
  const name = args.K8S_POD_NAME;
  if (!namespace || !name) return undefined;
  return { key: podKey(namespace, name), pending: namespaceHasPolicies(root, namespace) };
}

/** A pod address as the result reports it, with the gateway its routes use. */
function podIp(cidr: string) {
  const ip = hostPrefix(cidr);
  return { address: formatCidr(ip), gateway: ip.family === AF_INET ? GATEWAY_V4 : GATEWAY_V6, interface: 1 };
}
