/**
 * Named pause points for fault-injection tests. When NETKIT_CNI_PAUSE_AT names a step,
 * the plugin creates the file NETKIT_CNI_PAUSE_FILE on reaching it and waits until the
 * test removes that file (or kills the process, which is the point: proving that an ADD
 * interrupted at any step leaves nothing a later DEL or GC cannot remove). When
 * NETKIT_CNI_FAIL_AT names it, the step fails there instead, as a kernel refusal would:
 * the ADD's own undo must then leave nothing. Without the variables this is a no-op.
 */
import * as fs from "node:fs";

export type Failpoint =
  | "ipam-allocated"
  /** Inside the datapath's step: the kernel made the pair, which is not read back yet. */
  | "pair-requested"
  | "pair-created"
  | "pod-configured"
  | "host-configured"
  | "fastpath-attached"
  /** DEL: the addresses released; the device and the pod's state untouched. */
  | "del-ipam-released"
  /** DEL with a deferred teardown: the device retired; its pins and entries still there. */
  | "del-retired"
  /** DEL: the pins and entries removed; the device (inline) not yet deleted. */
  | "del-endpoint-removed"
  /** DEL or GC pruning dead endpoints, between listing the endpoint map and the live devices. */
  | "prune-listed";

export async function failpoint(step: Failpoint): Promise<void> {
  if (process.env.NETKIT_CNI_FAIL_AT === step) throw new Error(`failure injected at ${step}`);
  if (process.env.NETKIT_CNI_PAUSE_AT !== step) return;
  const file = process.env.NETKIT_CNI_PAUSE_FILE;
  if (!file) return;
  fs.writeFileSync(file, `${process.pid}\n`);
  while (fs.existsSync(file)) await new Promise((r) => setTimeout(r, 20));
}
