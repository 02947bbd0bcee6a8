/**
 * Backlog-queue crossings, counted exactly: every packet that enters a CPU's backlog
 * queue fires the kernel's net:netif_rx tracepoint once, so the number of events for a
 * fixed number of packets is a property of the path, not of machine noise.
 *
 * Unlike test/integration/netif-rx.ts (the tests' counter, on the global trace buffer),
 * this uses a tracefs instance of its own with a filter on the packet length, so the
 * machine's other traffic and other users of tracefs neither disturb nor see it. The
 * probe packets have lengths nothing else here sends: pings of 1400 bytes of data (IP
 * length 1428), TCP_RR requests of 1000 bytes and responses of 1200 (IP length + 52:
 * IPv4 and TCP headers with timestamps). Each event names the device the packet was
 * queued for, which tells where on the path the crossing happened.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { onCleanup } from "./cleanup";

const TRACEFS = "/sys/kernel/tracing";

export const PING_BYTES = 1400;
export const PING_LEN = PING_BYTES + 28;
export const RR_REQUEST = 1000;
export const RR_RESPONSE = 1200;
export const RR_REQUEST_LEN = RR_REQUEST + 52;
export const RR_RESPONSE_LEN = RR_RESPONSE + 52;

/** Where a crossing happened, from the device the packet was queued for. */
export type Hop = "wire" | "loopback" | "intoPod" | "outOfPod";

export function hopOf(dev: string): Hop {
  if (dev === "wire0") return "wire";
  if (dev === "lo") return "loopback";
  // The pod's own end of its pair: queued on the way into the pod.
  if (dev === "eth0") return "intoPod";
  // A node-side end (bridge port, ptp/veth/netkit host end): on the way out of a pod.
  return "outOfPod";
}

export interface Events {
  /** Events per IP length. */
  byLen: Map<number, Map<Hop, number>>;
  lost: number;
}

export class NetifRxCounter {
  private readonly dir: string;

  constructor(name: string) {
    if (!fs.existsSync(`${TRACEFS}/instances`)) execFileSync("mount", ["-t", "tracefs", "tracefs", TRACEFS]);
    this.dir = path.join(TRACEFS, "instances", name);
    fs.mkdirSync(this.dir);
    onCleanup(() => this.remove());
    fs.writeFileSync(path.join(this.dir, "buffer_size_kb"), "4096");
    const filter = [PING_LEN, RR_REQUEST_LEN, RR_RESPONSE_LEN].map((l) => `len == ${l}`).join(" || ");
    fs.writeFileSync(path.join(this.dir, "events/net/netif_rx/filter"), filter);
  }

  /** netif_rx events for our probe lengths while `fn` runs. */
  count(fn: () => void): Events {
    const enable = path.join(this.dir, "events/net/netif_rx/enable");
    fs.writeFileSync(path.join(this.dir, "trace"), "");
    fs.writeFileSync(enable, "1");
    try {
      fn();
    } finally {
      fs.writeFileSync(enable, "0");
    }
    const byLen = new Map<number, Map<Hop, number>>();
    for (const line of fs.readFileSync(path.join(this.dir, "trace"), "utf8").split("\n")) {
      const m = /netif_rx: dev=(\S+) skbaddr=\S+ len=(\d+)/.exec(line);
      if (!m) continue;
      const len = Number(m[2]);
      const hop = hopOf(m[1] ?? "");
      const hops = byLen.get(len) ?? new Map<Hop, number>();
      hops.set(hop, (hops.get(hop) ?? 0) + 1);
      byLen.set(len, hops);
    }
    return { byLen, lost: this.overruns() };
  }

  private overruns(): number {
    let lost = 0;
    const perCpu = path.join(this.dir, "per_cpu");
    for (const cpu of fs.readdirSync(perCpu)) {
      const stats = fs.readFileSync(path.join(perCpu, cpu, "stats"), "utf8");
      lost += Number(/^overrun: (\d+)/m.exec(stats)?.[1] ?? 0);
    }
    return lost;
  }

  private remove(): void {
    try {
      fs.writeFileSync(path.join(this.dir, "events/net/netif_rx/enable"), "0");
    } catch {
      // already gone
    }
    fs.rmdirSync(this.dir);
  }
}

/** Per-packet figures: events / packets, in total and per hop. */
export interface PerPacket {
  packets: number;
  total: number;
  hops: Record<Hop, number>;
}

export function perPacket(events: Map<Hop, number> | undefined, packets: number): PerPacket {
  const get = (h: Hop) => (events?.get(h) ?? 0) / packets;
  const hops = { wire: get("wire"), loopback: get("loopback"), intoPod: get("intoPod"), outOfPod: get("outOfPod") };
  return { packets, total: hops.wire + hops.loopback + hops.intoPod + hops.outOfPod, hops };
}

/** Crossings per packet of one TCP_RR run, each way. */
export interface RrCrossings {
  rrRequest: PerPacket;
  rrResponse: PerPacket;
  /** Trace events the kernel dropped while counting (the figures are then low). */
  lost: number;
}

/**
 * Backlog-queue crossings per TCP_RR packet of one client-server pair: a warm-up of 50
 * transactions, then `transactions` counted. `rr` runs netperf for a count of
 * transactions and says why it failed; `what` names the pair in errors.
 */
/** TCP_RR transactions run before the counted run: the first connection's setup stays out of the count. */
export const WARM_UP_TRANSACTIONS = 50;

export function rrCrossings(
  counter: NetifRxCounter,
  rr: (transactions: number) => { error?: string },
  transactions: number,
  what: string,
): RrCrossings {
  const warm = rr(WARM_UP_TRANSACTIONS);
  if (warm.error) throw new Error(`${what}: ${warm.error}`);
  const events = counter.count(() => {
    const r = rr(transactions);
    if (r.error) throw new Error(`${what}: ${r.error}`);
  });
  return {
    rrRequest: perPacket(events.byLen.get(RR_REQUEST_LEN), transactions),
    rrResponse: perPacket(events.byLen.get(RR_RESPONSE_LEN), transactions),
    lost: events.lost,
  };
}

/** `count` pings of PING_BYTES from a netns, 2 ms apart; throws if any is lost. */
export function pingSized(netns: string, target: string, count: number): void {
  execFileSync(
    "nsenter",
    [
      `--net=/run/netns/${netns}`,
      "ping",
      "-q",
      "-c",
      String(count),
      "-s",
      String(PING_BYTES),
      "-i",
      "0.002",
      "-W",
      "2",
      target,
    ],
    { stdio: "pipe", timeout: 60_000 },
  );
}
