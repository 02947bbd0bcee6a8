/**
 * A pod's ingress limit shaped on its host device: the qdisc there is where every path into
 * the pod passes once the programs stop taking bpf_redirect_peer into it (bpf/lib/
 * bandwidth.h, "nkc_bw_ingress_via_host"): the uplink's redirects, a local pod's, and what
 * the stack delivers.
 *
 * Which qdisc, best first:
 *  - fq: the programs stamp departure times from the pod's ingress bucket (EDT, the same
 *    clock as egress pacing) and fq releases them. The queue is bounded by the programs'
 *    horizon, as egress is. TCP sees a slower link, not a policer's losses.
 *  - tbf, where the kernel has no sch_fq: the qdisc alone shapes to the rate and burst,
 *    the reference bandwidth plugin's way. With a burst of 50 ms of the rate, TCP
 *    reaches the rate through it; a policer with the same burst lets it reach a quarter
 *    (bench/README.md, "Rate limits").
 *  - the programs' policer, as before, where neither qdisc can be attached.
 *
 * The host device is ours (made by this ADD, deleted by DEL and GC with everything on it),
 * so its root qdisc is ours to set; it carries our handle (4e4b:) so that CHECK tells it
 * from anything else. The qdisc goes before the programs learn the mode: until the map
 * entry says so nothing is redirected to the host device.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { IngressMode } from "../bpf/index";
import type { RateLimit } from "../cni/bandwidth";
import { log } from "../log";
import { addQdisc, listQdiscs, TC_H_ROOT, tbfOptions, tcHandle, tcMajor } from "../netlink/qdisc";
import type { RtnlSocket } from "../netlink/socket";
import { mkdirs } from "../sys/mkdirs";
import { OUR_MAJOR } from "./shaping";

/** The bound on what waits in the tbf: the programs' EDT horizon (NKC_BW_HORIZON_NS), so
 * both ways of shaping hold the same queue. Not the burst as well: runtimes pass bursts
 * of 512 MiB, which would let that much wait on the node. */
const QUEUE_MS = 100;
/** ... but room for two of the largest GSO packets, which tbf sends whole when they fit
 * the burst: a queue smaller than one would drop every one of them. */
const MIN_QUEUE_BYTES = 2 * 65_536;
/** A full Ethernet frame's header beyond the MTU: tbf sends no packet larger than its
 * burst whole, so the burst is at least one frame. */
const ETH_HLEN = 14;

/** Where the last ADD in this network namespace that could not pace an ingress limit says
 * why, for `status`. */
const note = () => path.join("/run/netkit-cni", "pacing", `ingress-${fs.statSync("/proc/self/ns/net").ino}.off`);

/** How the pod's ingress is enforced, and, unless paced, why not. */
interface IngressShaping {
  mode: IngressMode;
  reason?: string;
}

/** The qdisc each mode puts on the host device. */
const QDISC_OF: Partial<Record<IngressMode, string>> = { edt: "fq", qdisc: "tbf" };

/**
 * Gives the pod's host device the best qdisc the kernel has for `limit` and says how the
 * ingress limit is to be enforced. Never fails the ADD: without either qdisc the answer
 * is policing. Nothing to undo: the device goes with its qdisc.
 */
export async function shapePodIngress(
  host: RtnlSocket,
  hostIfindex: number,
  limit: RateLimit,
  mtu: number,
): Promise<IngressShaping> {
  const root = { ifindex: hostIfindex, parent: TC_H_ROOT, handle: tcHandle(OUR_MAJOR, 0) };
  let noFq: string;
  try {
    await addQdisc(host, { ...root, kind: "fq" });
    fs.rmSync(note(), { force: true });
    return { mode: "edt" };
  } catch (e) {
    noFq = (e as Error).message;
  }
  try {
    await addQdisc(host, { ...root, kind: "tbf", options: tbfOptions(tbfSettings(limit, mtu)) });
    return noted({ mode: "qdisc", reason: `shaped by tbf: no fq (${noFq})` });
  } catch (e) {
    return noted({ mode: "police", reason: `policed: no fq (${noFq}), no tbf (${(e as Error).message})` });
  }
}

/** tbf's settings for a limit in bits: the rate and burst in bytes, the burst at least
 * one full frame, and a queue of QUEUE_MS at the rate. */
export function tbfSettings(limit: RateLimit, mtu: number) {
  const rate = Math.floor(limit.rate / 8);
  const burst = Math.max(Math.floor(limit.burst / 8), mtu + ETH_HLEN);
  return { rate, burst, limit: Math.max(Math.floor((rate * QUEUE_MS) / 1000), MIN_QUEUE_BYTES) };
}

function noted(shaping: IngressShaping): IngressShaping {
  log.warn(`ingress limits are ${shaping.reason}`);
  const file = note();
  mkdirs(path.dirname(file), 0o700);
  fs.writeFileSync(`${file}.${process.pid}`, shaping.reason ?? "", { mode: 0o600 });
  fs.renameSync(`${file}.${process.pid}`, file);
  return shaping;
}

/** Why the last pod whose ingress could not be paced was shaped or policed instead. */
export function readIngressShapingOff(): string | undefined {
  try {
    return fs.readFileSync(note(), "utf8") || undefined;
  } catch {
    return undefined;
  }
}

/** CHECK: a paced or shaped pod needs its qdisc on the host device still. */
export async function ingressQdiscProblem(
  host: RtnlSocket,
  hostIfindex: number,
  mode: IngressMode,
): Promise<string | undefined> {
  const want = QDISC_OF[mode];
  if (!want) return undefined;
  const root = (await listQdiscs(host, hostIfindex)).find((q) => q.parent === TC_H_ROOT);
  if (root?.kind === want && tcMajor(root.handle) === OUR_MAJOR) return undefined;
  const have = root ? `${root.kind} ${tcMajor(root.handle).toString(16)}:` : "none";
  return `ingress is ${mode === "edt" ? "paced" : "shaped"} by ${want} ${OUR_MAJOR.toString(16)}: on the host device, which has ${have}`;
}
