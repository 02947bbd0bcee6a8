/**
 * The IPAM half of every verb, behind one interface whether addresses come from the
 * embedded allocator (`ipam.type: "netkit-cni"`, src/ipam) or from a delegated plugin
 * found in CNI_PATH (src/cni/delegate). Never delegates to ourselves: with the embedded
 * type that would exec this very binary with the same config, forever.
 */
import type { Attachment } from "../cni/config";
import { type DelegateTarget, delegateAdd, delegateCheck, delegateDel, delegateSince110 } from "../cni/delegate";
import { CniError, ErrorCode, invalidConfig } from "../cni/errors";
import type { Result } from "../cni/result";
import * as embedded from "../ipam/index";
import type { Invocation } from "./invocation";

export interface IpamBackend {
  /** For messages: "embedded ipam" or "ipam plugin host-local". */
  readonly name: string;
  add(): Result;
  /** Idempotent: releasing what is not allocated succeeds. */
  del(): void;
  check(addresses: string[]): void;
  /**
   * `removed`: the attachments whose devices this GC deleted, for an IPAM that cannot GC
   * by itself. Returns a line for the log saying what was done.
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

function delegatedBackend(target: DelegateTarget): IpamBackend {
  return {
    name: `ipam plugin ${target.pluginType}`,
    add: () => delegateAdd(target),
    del: () => delegateDel(target),
    check: () => delegateCheck(target),
    gc: (_valid, removed) => {
      if (delegateSince110(target, "GC")) return "forwarded";
      // Without GC its addresses would stay reserved forever: free those of the attachments
      // this GC removed (an attachment whose device was already gone is not known here).
      const failures: string[] = [];
      for (const a of removed) {
        try {
          delegateDel(attachmentTarget(target, a));
        } catch (e) {
          failures.push(`${a.containerId}/${a.ifname}: ${(e as Error).message}`);
        }
      }
      if (failures.length > 0) throw new CniError(ErrorCode.IpamFailure, failures.join("; "));
      const released = removed.map((a) => `${a.containerId}/${a.ifname}`).join(", ");
      return `plugin predates GC; released by DEL: ${released || "nothing"}`;
    },
    status: () => {
      delegateSince110(target, "STATUS");
    },
  };
}

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
  return delegatedBackend({ pluginType: ipam.type, searchPath: inv.env.path, conf: inv.conf.raw, env: inv.processEnv });
}

export function requireIpamBackend(inv: Invocation): IpamBackend {
  const backend = ipamBackend(inv);
  if (!backend) throw invalidConfig(`"ipam" is required: the plugin needs addresses for the pod`);
  return backend;
}
