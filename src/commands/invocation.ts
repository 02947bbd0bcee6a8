/** One run of the plugin: the parsed environment and configuration every verb receives. */
import type { NetConf } from "../cni/config";
import type { DelegateTarget } from "../cni/delegate";
import type { CniEnv } from "../cni/env";
import { invalidConfig } from "../cni/errors";

export interface Invocation {
  env: CniEnv;
  conf: NetConf;
  /** The process environment, forwarded to delegated plugins. */
  processEnv: NodeJS.ProcessEnv;
}

/** How to reach the IPAM plugin, or undefined when the config has none. */
export function ipamTarget(inv: Invocation): DelegateTarget | undefined {
  if (!inv.conf.ipam) return undefined;
  return {
    pluginType: inv.conf.ipam.type,
    searchPath: inv.env.path,
    conf: inv.conf.raw,
    env: inv.processEnv,
  };
}

export function requireIpamTarget(inv: Invocation): DelegateTarget {
  const target = ipamTarget(inv);
  if (!target) throw invalidConfig(`"ipam" is required: the plugin needs addresses for the pod`);
  return target;
}
