/**
 * `netkit-cni status` for people: the facts status.ts gathers (a NodeStatus), one line
 * per subject. A pure function: no system calls, so it is tested on made-up facts.
 */
import type { NodeStatus } from "./status";

export function formatStatus(s: NodeStatus): string {
  const yes = (b: boolean) => (b ? "yes" : "no");
  const lines = [
    `kernel          ${s.kernel.release}: netkit ${yes(s.kernel.netkit)}, tcx ${yes(s.kernel.tcx)}, bpffs ${s.kernel.bpffsMounted ? "mounted" : "not mounted"}`,
    `datapath auto   ${s.autoDatapath}`,
    `bpffs root      ${s.bpffsRoot}${s.initialized ? "" : " (nothing pinned yet)"}`,
    `programs        build ${s.programs.running ?? s.programs.build}: ${
      Object.keys(s.programs.ids).length > 0
        ? Object.entries(s.programs.ids)
            .map(([n, id]) => `${n}=${id}`)
            .join(" ")
        : "not loaded"
    }`,
  ];
  const nat = s.programs.natCheck;
  lines.push(
    `NAT check       ${nat ?? "none loaded"}${
      s.programs.conntrackUnavailable ? ` (conntrack unavailable: ${s.programs.conntrackUnavailable})` : ""
    }`,
  );
  const t = s.flowTables;
  lines.push(
    `flow tables     ${t.tables} of ${t.capacityEach} entries each: ${t.entries} held, ${t.remembered} remembered, ${t.forgotten} forgotten, ${t.evicted} evicted`,
  );
  for (const u of s.uplinks) {
    lines.push(
      `uplink link     ${u.pin}: link ${u.linkId}, program ${u.programId}, on ${u.device ?? `ifindex ${u.ifindex}`}`,
    );
  }
  const sb = s.sockBypass;
  const why = sb.off?.reason ?? sb.unavailable;
  lines.push(
    `socket bypass   ${
      sb.links.length > 0
        ? `on: ${sb.links.map((l) => `${l.pin} (program ${l.programId})`).join(", ")}; ${sb.sockets} sockets spliced`
        : why
          ? `off: ${why}`
          : `off (no pod of a network with "sockBypass": true yet)`
    }`,
  );
  // Another network's cgroup may run it while this one could not.
  if (sb.links.length > 0 && sb.off)
    lines.push(`socket bypass   off for ${sb.off.cgroup ?? "the cgroup v2 root"}: ${sb.off.reason}`);
  const modes = Object.entries(s.bandwidth.modes).map(
    ([m, n]) => `${n} ${m === "police" ? "policed (token bucket in the programs)" : m}`,
  );
  lines.push(`rate limits     ${s.bandwidth.limited} pods${modes.length > 0 ? `: ${modes.join(", ")}` : ""}`);
  for (const shared of s.sharedSubnets) {
    lines.push(`shared subnet   ${shared.device}: answering ARP/ND for ${shared.addresses.join(", ")}`);
  }
  lines.push(
    `endpoints       ${s.endpoints.devices} devices, ${s.endpoints.pinned} with programs, ${s.endpoints.addresses} addresses in the endpoint map`,
  );
  if (s.problems.length === 0) lines.push("problems        none");
  else for (const p of s.problems) lines.push(`problem         ${p}`);
  return lines.join("\n");
}
