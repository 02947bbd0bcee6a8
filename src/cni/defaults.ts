/**
 * Where a configuration's files are when it does not say: read by the configuration's
 * parser (config.ts) and by the plugin's first step, which names the files a verb would
 * open to the node's agent before the parser is even loaded (agent/verbs/protocol.ts).
 * One home, so the two never disagree.
 */
export const DEFAULT_BPFFS_ROOT = "/sys/fs/bpf/netkit-cni";
export const DEFAULT_LOG_FILE = "/var/log/netkit-cni.log";
