/** One run of the plugin: the parsed environment and configuration every verb receives. */
import type { NetConf } from "../cni/config";
import type { CniEnv } from "../cni/env";

export interface Invocation {
  env: CniEnv;
  conf: NetConf;
  /** The process environment, forwarded to delegated plugins. */
  processEnv: NodeJS.ProcessEnv;
}
