/**
 * The IPAM half of every verb, behind one interface whether addresses come from the
 * embedded allocator (`ipam.type: "netkit-cni"`, src/ipam) or from a delegated plugin
 * found in CNI_PATH (src/cni/delegate). Never delegates to ourselves: with the embedded
 * type that would exec this very binary with the same config, forever.
 */
import type { Attachment, IpamConf } from "../cni/config";
import { type DelegateTarget, delegateAdd, delegateCheck, delegateDel, delegateSince110 } from "../cni/delegate";
import { CniError, ErrorCode, invalidConfig } from "../cni/errors";
import type { Result } from "../cni/result";
import * as embedded from "../ipam/index";
import { HOST_LOCAL, type Holder, hostLocalStoreDir, knownTo, listHolders } from "../ipam/index";
import type { Invocation } from "./invocation";

interface IpamBackend {
  /** For messages: "embedded ipam" or "ipam plugin host-local". */
  readonly name: string;
  add(): Result;
  /** Idempotent: releasing what is not allocated succeeds. */
  del(): void;
  check(addresses: string[]): void;
  /**
   * `removed`: the attachments whose devices this GC deleted, which an IPAM plugin that
   * cannot GC by itself is sent a DEL for (with host-local, also every other attachment
   * its store names and `valid` does not). Returns a line for the log saying what was
   * done, released addresses included.
   */
  gc(valid: Attachment[], removed: Attachment[]): string;
  status(): void;
}

function embeddedBackend(inv: Invocation, cfg: embedded.EmbeddedIpamConfig): IpamBackend {
  const { containerId, ifname } = inv.env;
  return {
    name: "embedded ipam",
    add: () => embedded.allocate(cfg, containerId, ifname),
    // prevResult names the addresses, so DEL need not read every reservation to find them.
    del: () =>
      embedded.release(
        cfg,
        containerId,
        ifname,
        (inv.conf.prevResult?.ips ?? []).map((ip) => ip.address),
      ),
    check: (addresses) => embedded.check(cfg, containerId, ifname, addresses),
    // The store is <dataDir>/<network name>: another network's addresses are not in it.
    gc: (valid) => {
      const { released } = embedded.gc(cfg, valid);
      return released.length ? `released ${released.join(", ")}` : "nothing to release";
    },
    status: () => embedded.status(cfg),
  };
}

function delegatedBackend(target: DelegateTarget, ipam: IpamConf, network: string): IpamBackend {
  return {
    name: `ipam plugin ${target.pluginType}`,
    add: () => delegateAdd(target),
    del: () => delegateDel(target),
    check: () => delegateCheck(target),
    gc: (valid, removed) =>
      delegateSince110(target, "GC") ? "forwarded" : gcByDel(target, staleAttachments(ipam, network, valid, removed)),
    status: () => {
      delegateSince110(target, "STATUS");
    },
  };
}

interface StaleList {
  /** `ifname` undefined: host-local's old-format reservations, which name only the container. */
  stale: Holder[];
  /** How they were found, for the log. */
  source: string;
  /** Why the list may be short (the store could not be read). */
  failure?: string;
}

/**
 * For a plugin without GC, the attachments it holds addresses for that the runtime no
 * longer knows, each once. Without this its addresses would stay reserved forever. The
 * ones whose device this GC deleted come first; for host-local, whose state is its store
 * (this network's directory only), also every attachment the store names and the
 * runtime does not: the pods that vanished without a DEL, their device pair gone with
 * the netns. Any other plugin's state is not visible here, so only the former.
 */
function staleAttachments(ipam: IpamConf, network: string, valid: Attachment[], removed: Attachment[]): StaleList {
  const stale = new Map<string, Holder>();
  const keyOf = (a: { containerId: string; ifname: string | undefined }) => JSON.stringify([a.containerId, a.ifname]);
  for (const a of removed) stale.set(keyOf(a), { ...a, ips: [] });
  if (ipam.type !== HOST_LOCAL) {
    return {
      stale: [...stale.values()],
      source: "its state is not visible here, so only the attachments whose device GC deleted",
    };
  }
  const dir = hostLocalStoreDir(ipam, network);
  if (dir === undefined) return { stale: [...stale.values()], source: `"ipam.dataDir" is no path: nothing to read` };
  try {
    const known = knownTo(valid);
    for (const h of listHolders(dir)) if (!known(h)) stale.set(keyOf(h), h);
  } catch (e) {
    return { stale: [...stale.values()], source: `store ${dir}`, failure: (e as Error).message };
  }
  // Old-format reservations last: host-local's DEL frees them only when it finds none
  // naming the attachment exactly, so the container's exact ones must be gone first.
  const ordered = [...stale.values()].sort((a, b) => Number(a.ifname === undefined) - Number(b.ifname === undefined));
  return { stale: ordered, source: `store ${dir}` };
}

/** A DEL for each stale attachment; returns the log line, or throws naming what failed (and what did not). */
function gcByDel(target: DelegateTarget, list: StaleList): string {
  const released: string[] = [];
  const failures = list.failure ? [list.failure] : [];
  for (const a of list.stale) {
    const what = `${a.containerId}/${a.ifname ?? "(any)"}${a.ips.length > 0 ? ` ${a.ips.join(" ")}` : ""}`;
    const attachment = { containerId: a.containerId, ifname: a.ifname ?? OLD_FORMAT_IFNAME };
    try {
      delegateDel(attachmentTarget(target, attachment));
      released.push(what);
    } catch (e) {
      failures.push(`${what}: ${(e as Error).message}`);
    }
  }
  const summary = `plugin predates GC (${list.source}); released by DEL: ${released.join(", ") || "nothing"}`;
  if (failures.length > 0) throw new CniError(ErrorCode.IpamFailure, `${summary}; failed: ${failures.join("; ")}`);
  return summary;
}

/**
 * host-local's DEL needs an ifname, and frees a container's old-format reservations when
 * none names the attachment exactly. A stale old-format one belongs to a container with
 * no valid attachment, whose exact reservations are stale too and released before it:
 * any name does.
 */
const OLD_FORMAT_IFNAME = "eth0";

/**
 * The delegate as a DEL of one attachment sees it: that attachment in the environment (no
 * netns: DEL needs none) and the network config without GC's list.
 */
function attachmentTarget(target: DelegateTarget, a: Attachment): DelegateTarget {
  const { "cni.dev/valid-attachments": _, ...conf } = target.conf;
  const { CNI_NETNS: __, ...env } = target.env;
  return { ...target, conf, env: { ...env, CNI_CONTAINERID: a.containerId, CNI_IFNAME: a.ifname } };
}

/** The configured IPAM, or undefined when the config has none. */
export function ipamBackend(inv: Invocation): IpamBackend | undefined {
  const ipam = inv.conf.ipam;
  if (!ipam) return undefined;
  if (embedded.isEmbeddedIpam(ipam)) return embeddedBackend(inv, embedded.parseIpamConfig(ipam, inv.conf.name));
  const target = { pluginType: ipam.type, searchPath: inv.env.path, conf: inv.conf.raw, env: inv.processEnv };
  return delegatedBackend(target, ipam, inv.conf.name);
}

export function requireIpamBackend(inv: Invocation): IpamBackend {
  const backend = ipamBackend(inv);
  if (!backend) throw invalidConfig(`"ipam" is required: the plugin needs addresses for the pod`);
  return backend;
}
