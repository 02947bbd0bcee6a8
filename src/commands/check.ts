/**
 * CHECK: verify the pod's network is still what ADD made, as recorded in prevResult:
 * both device ends exist and are up, the pod has its addresses and default routes, the
 * host routes each address to the pod, and its rate limits are the ones the config (or
 * the runtime's bandwidth capability) asks for now. The first difference fails with a
 * message that says what is missing and where.
 */

import { podKey } from "../bpf/index";
import { formatCidr, hostPrefix } from "../cni/address";
import { type Bandwidth, podBandwidth } from "../cni/bandwidth";
import { CniError, ErrorCode, invalidConfig } from "../cni/errors";
import type { IpConfig, Result } from "../cni/result";
import { closeNamespaces, openNamespaces } from "../datapath/namespaces";
import { aliasClaims, hostDeviceName } from "../datapath/naming";
import { endpointMapEntries, limitsOf, podStateMismatchesOf } from "../datapath/node-state";
import { type AttachedPodPrograms, attachedPodPrograms } from "../datapath/pod-filters";
import { ingressQdiscProblem } from "../datapath/pod-shaping";
import { retiredFor } from "../datapath/retired";
import { pacingProblem } from "../datapath/shaping";
import { listAddresses } from "../netlink/addrs";
import { getLinkByName, isUp, type Link } from "../netlink/links";
import { listRoutes, type Route } from "../netlink/routes";
import type { RtnlSocket } from "../netlink/socket";
import type { Invocation } from "./invocation";
import { ipamBackend } from "./ipam-backend";

const mismatch = (msg: string) => new CniError(ErrorCode.CheckMismatch, msg);

export async function cmdCheck(inv: Invocation): Promise<void> {
  const { env, conf } = inv;
  const prev = conf.prevResult;
  if (!prev) throw invalidConfig("CHECK needs prevResult: the result of the ADD being checked");
  const addresses = podAddresses(prev, env.ifname).map((ip) => ip.address);
  const bandwidth = podBandwidth(conf.bandwidthRequest);

  const ns = openNamespaces(env.netns);
  try {
    const hostDevice = hostDeviceName(env.containerId, env.ifname);
    const found = await getLinkByName(ns.host, hostDevice);
    // Said before IPAM's answer (the DEL freed the addresses too): this says why.
    if (found && retiredFor(found, { network: conf.name, containerId: env.containerId, ifname: env.ifname })) {
      throw mismatch(`host device ${hostDevice} was retired by a DEL of ${env.containerId}/${env.ifname}`);
    }
    ipamBackend(inv)?.check(addresses);
    const hostLink = requireUp(found, `host device ${hostDevice}`);
    if (!aliasClaims(hostLink.alias, conf.name, env.containerId, env.ifname)) {
      throw mismatch(
        `host device ${hostDevice} is not labelled as belonging to ${env.containerId}/${env.ifname} on network ${conf.name}`,
      );
    }
    const podLink = requireUp(await getLinkByName(ns.pod, env.ifname), `interface ${env.ifname} in ${env.netns}`);

    const podAddrs = await listAddresses(ns.pod, podLink.index);
    for (const cidr of addresses) {
      const want = hostPrefix(cidr);
      if (!podAddrs.some((a) => a.address === want.address && a.prefixLength === want.prefixLength)) {
        throw mismatch(`address ${formatCidr(want)} is missing on ${env.ifname} in ${env.netns}`);
      }
    }

    const podRoutes = await listRoutes(ns.pod);
    // The routes ADD reported (a second interface may have added none).
    for (const r of prev.routes.filter((route) => route.gw !== undefined)) {
      if (!hasRoute(podRoutes, r.dst, podLink.index, r.gw)) {
        throw mismatch(`route ${r.dst} via ${r.gw} dev ${env.ifname} is missing in ${env.netns}`);
      }
    }
    const hostRoutes = await listRoutes(ns.host);
    for (const cidr of addresses) {
      const dst = formatCidr(hostPrefix(cidr));
      if (!hasRoute(hostRoutes, dst, hostLink.index)) {
        throw mismatch(`route ${dst} dev ${hostDevice} is missing on the host`);
      }
    }
    const root = conf.fastPath.bpffsRoot;
    const attached = await attachedPodPrograms(ns.host, root, hostDevice, hostLink.index);
    checkFastPath(root, hostDevice, hostLink.index, addresses, attached);
    if (conf.fastPath.networkPolicy && !attached.policy) {
      throw mismatch(
        `NetworkPolicy of ${hostDevice} is not attached (no ${root}/endpoints/${hostDevice}/policy, no tc filter)`,
      );
    }
    // Its state in the node's maps (bpf/pod-state.ts), as the config asks for it now.
    const named = env.args.K8S_POD_NAMESPACE && env.args.K8S_POD_NAME;
    const pod = {
      hostIfindex: hostLink.index,
      bandwidth,
      serviceTranslation: conf.fastPath.serviceTranslation,
      policy:
        conf.fastPath.networkPolicy && named
          ? { key: podKey(env.args.K8S_POD_NAMESPACE as string, env.args.K8S_POD_NAME as string), pending: false }
          : undefined,
    };
    const problems = podStateMismatchesOf(root, pod);
    if (problems.length > 0) throw mismatch(`${hostDevice}: ${problems.join("; ")}`);
    await checkLimits(ns.host, root, hostDevice, hostLink.index, bandwidth, attached);
  } finally {
    closeNamespaces(ns);
  }
}

/** The pod's program runs (the fast path's, or with `"fastPath": false` the source check;
 * a pinned link, or a tc filter) and the endpoint map sends each address to its device. */
function checkFastPath(
  root: string,
  hostDevice: string,
  hostIfindex: number,
  addresses: string[],
  attached: AttachedPodPrograms,
): void {
  if (!attached.fromPod) {
    throw mismatch(
      `eBPF programs of ${hostDevice} are not attached (no pins under ${root}/endpoints/${hostDevice}, no tc filter)`,
    );
  }
  const entries = endpointMapEntries(root);
  for (const cidr of addresses) {
    const ip = hostPrefix(cidr).address;
    const entry = entries.get(ip);
    if (entry?.hostIfindex !== hostIfindex) {
      throw mismatch(`endpoint map entry for ${ip} is ${entry ? `on ifindex ${entry.hostIfindex}` : "missing"}`);
    }
  }
}

/** An ingress limit has its program and its qdisc, and a paced egress limit still has an
 * uplink that paces. */
async function checkLimits(
  host: RtnlSocket,
  root: string,
  hostDevice: string,
  hostIfindex: number,
  want: Bandwidth | undefined,
  attached: AttachedPodPrograms,
): Promise<void> {
  const have = limitsOf(root, hostIfindex);
  // A tbf shapes alone; policing and pacing need the program on the host device.
  if (want?.ingress && have?.ingressMode !== "qdisc" && !attached.ingressLimit) {
    throw mismatch(
      `ingress limit of ${hostDevice} is not attached (no ${root}/endpoints/${hostDevice}/ingress_limit, no tc filter)`,
    );
  }
  if (have?.ingress && have.ingressMode) {
    const problem = await ingressQdiscProblem(host, hostIfindex, have.ingressMode);
    if (problem) throw mismatch(`rate limits of ${hostDevice}: ${problem}`);
  }
  if (have?.egress && have.mode === "edt") {
    const problem = await pacingProblem(host, have.pacedIfindex);
    if (problem) throw mismatch(`rate limits of ${hostDevice}: ${problem}`);
  }
}

function requireUp(link: Link | undefined, what: string): Link {
  if (!link) throw mismatch(`${what} does not exist`);
  if (!isUp(link)) throw mismatch(`${what} is down`);
  return link;
}

/** The prevResult IPs that belong to the pod interface `ifname`. */
function podAddresses(prev: Result, ifname: string): IpConfig[] {
  const index = prev.interfaces.findIndex((i) => i.name === ifname && i.sandbox);
  return prev.ips.filter((ip) => ip.interface === undefined || ip.interface === index);
}

function hasRoute(routes: Route[], dst: string, ifindex: number, gateway?: string): boolean {
  return routes.some((r) => r.dst === dst && r.ifindex === ifindex && (gateway === undefined || r.gateway === gateway));
}
