/**
 * Where every pin lives under a network's bpffs root: the one home of the layout, so that
 * loading, attach, DEL, GC, CHECK and status agree on it, and a new kind of pin is one
 * entry here. Paths only: nothing is opened or created.
 *
 *   maps/nkc_*                                    node maps (bpf/README.md lists them)
 *   programs/<epoch>-<hash>-<variant>/nkc_*        one build's programs (node.ts)
 *   uplink/<ifname>/ingress                       the uplink's link (the fast path)
 *   uplink/<ifname>/egress                        its egress link (NetworkPolicy)
 *   endpoints/<host device>/from_pod              each pod's link
 *   endpoints/<host device>/ingress_limit         a pod with an ingress limit
 *   endpoints/<host device>/policy                a pod of a network that enforces NetworkPolicy
 *   sock/programs/<epoch>-<hash>/…                the socket bypass's programs (sock/objects.ts)
 *   sock/sk_msg, sock/cgroup-<id>, sock/release-<id>   its links (datapath/sockbypass.ts)
 *   svc/programs/<epoch>-<hash>/…                 Service translation's programs (svc/objects.ts)
 *   svc/<hook>-<id>                               its links, one per hook and cgroup
 */
import * as path from "node:path";
import { sha256Hex } from "../../sys/sha256";

export const mapsDir = (root: string) => path.join(root, "maps");
export const mapPin = (root: string, name: string) => path.join(mapsDir(root), name);

export const programsRoot = (root: string) => path.join(root, "programs");

export const uplinkRoot = (root: string) => path.join(root, "uplink");
export const uplinkPin = (root: string, ifname: string, direction: "ingress" | "egress") =>
  path.join(uplinkRoot(root), ifname, direction);

/** The pod's program on what it sends (from its host device's ingress or netkit's peer). */
export const FROM_POD_PIN = "from_pod";
/** A pod with an ingress limit also has nkc_pod_ingress on its host device's transmit. */
export const INGRESS_LIMIT_PIN = "ingress_limit";
/** A pod of a network that enforces NetworkPolicy has nkc_pod_policy on its host device's transmit. */
export const POLICY_PIN = "policy";
/** The pins every endpoint has. */
export const ENDPOINT_PINS = [FROM_POD_PIN] as const;

export const endpointsRoot = (root: string) => path.join(root, "endpoints");
export const endpointDir = (root: string, hostDevice: string) => path.join(endpointsRoot(root), hostDevice);
export const endpointPin = (root: string, hostDevice: string, pin: string) =>
  path.join(endpointDir(root, hostDevice), pin);

export const sockRoot = (root: string) => path.join(root, "sock");
export const sockProgramsRoot = (root: string) => path.join(sockRoot(root), "programs");
/** The socket bypass's links: one sk_msg on the sockhash, a sock_ops and a sock_release
 * link per cgroup (named by a digest of its path: bpffs refuses dots and slashes). */
export const sockLinkPins = {
  skMsg: (root: string) => path.join(sockRoot(root), "sk_msg"),
  cgroup: (root: string, cgroup: string) => path.join(sockRoot(root), `cgroup-${sha256Hex([cgroup], 12)}`),
  release: (root: string, cgroup: string) => path.join(sockRoot(root), `release-${sha256Hex([cgroup], 12)}`),
};

export const svcRoot = (root: string) => path.join(root, "svc");
export const svcProgramsRoot = (root: string) => path.join(svcRoot(root), "programs");
/** Service translation's link for one hook ("connect4", …) on one cgroup (a digest of its path). */
export const svcLinkPin = (root: string, hook: string, cgroup: string) =>
  path.join(svcRoot(root), `${hook}-${sha256Hex([cgroup], 12)}`);
