/**
 * `netkit-cni status` for people: the facts status.ts gathers (a NodeStatus), one line
 * per subject and the maps as a table. A pure function: no system calls, so it is
 * tested on made-up facts (test/unit/status-format.test.ts).
 */

import type { MapOccupancy } from "../bpf/index";
import type { NodeStatus } from "./status";
import { formatEncryption } from "./status-encryption";
import { formatNetworkPolicy } from "./status-policy";
import type { ServiceTranslationStatus } from "./status-services";

/** How a pod's egress limit is enforced, in words. */
const MODE_TEXT: Record<string, string> = {
  police: "policed (token bucket in the programs)",
  edt: "paced (departure times, released by fq on the uplink)",
};

/** How a pod's ingress limit is enforced, in words. */
const INGRESS_MODE_TEXT: Record<string, string> = {
  police: "policed (token bucket in the programs)",
  edt: "paced (departure times, released by fq on its host device)",
  qdisc: "shaped (tbf on its host device)",
};

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
  if (t.fullest) {
    const f = t.fullest;
    const pod = f.containerId ? ` (container ${f.containerId.slice(0, 12)}${f.ifname ? `/${f.ifname}` : ""})` : "";
    lines.push(
      `fullest table   ${f.device ?? `ifindex ${f.ifindex}`}${pod}: ${f.entries}/${f.capacity} entries, ${f.evicted} evicted`,
    );
  }
  lines.push(...formatMaps(s.maps));
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
        ? `on: ${sb.links.map((l) => `${l.pin} (program ${l.programId})`).join(", ")}; ${sb.sockets} sockets spliced${sockRefusals(sb)}`
        : why
          ? `off: ${why}`
          : `off (no pod of a network with "sockBypass": true yet)`
    }`,
  );
  // Another network's cgroup may run it while this one could not.
  if (sb.links.length > 0 && sb.off)
    lines.push(`socket bypass   off for ${sb.off.cgroup ?? "the cgroup v2 root"}: ${sb.off.reason}`);
  lines.push(formatServiceTranslation(s.serviceTranslation));
  lines.push(...formatNetworkPolicy(s.networkPolicy));
  lines.push(...formatEncryption(s.encryption));
  const bw = s.bandwidth;
  const modes = (counts: Record<string, number>, text: Record<string, string>) =>
    Object.entries(counts).map(([m, n]) => `${n} ${text[m] ?? m}`);
  lines.push(`rate limits     ${bw.limited} pods`);
  const egress = modes(bw.modes, MODE_TEXT);
  if (egress.length > 0) lines.push(`  egress        ${egress.join(", ")}`);
  const ingress = modes(bw.ingressModes, INGRESS_MODE_TEXT);
  if (ingress.length > 0) lines.push(`  ingress       ${ingress.join(", ")}`);
  for (const off of bw.pacingOff) lines.push(`pacing          egress off on ${off.uplink}: ${off.reason}`);
  if (bw.ingressPacingOff && ingress.length > 0) lines.push(`pacing          ingress off: ${bw.ingressPacingOff}`);
  if (s.drops) {
    lines.push(`refused         by pods: ${formatDrops(s.drops.pods, "none")}`);
    for (const u of s.drops.uplinks) {
      lines.push(`refused         from the wire on ${u.device}: ${formatDrops(u.drops, "none")}`);
    }
  }
  for (const shared of s.sharedSubnets) {
    lines.push(`shared subnet   ${shared.device}: answering ARP/ND for ${shared.addresses.join(", ")}`);
  }
  lines.push(
    `endpoints       ${s.endpoints.devices} devices, ${s.endpoints.pinned + s.endpoints.filtered} with programs${s.endpoints.filtered > 0 ? ` (${s.endpoints.filtered} as tc filters)` : ""}, ${s.endpoints.addresses} addresses in the endpoint map`,
  );
  if (s.endpoints.retired > 0) {
    lines.push(
      `retired         ${s.endpoints.retired} device pairs DEL'd, waiting for their netns's teardown, the agent or GC`,
    );
  }
  if (s.problems.length === 0) lines.push("problems        none");
  else for (const p of s.problems) lines.push(`problem         ${p}`);
  return lines.join("\n");
}

/** "spoofed:3,tagged:1": the reasons that refused anything (bpf/lib/frame.h), or `none`. */
export function formatDrops(drops: Record<string, number> | undefined, none = "-"): string {
  const seen = Object.entries(drops ?? {}).filter(([, n]) => n > 0);
  return seen.length > 0 ? seen.map(([why, n]) => `${why}:${n}`).join(",") : none;
}

/** The node's maps as a table under a "maps" label, and what happens when one is full. */
function formatMaps(maps: readonly MapOccupancy[]): string[] {
  if (maps.length === 0) return ["maps            none pinned"];
  const rows = [
    ["NAME", "KIND", "ENTRIES", "CAPACITY"],
    ...maps.map((m) => [m.name, m.kind, String(m.entries), String(m.capacity)]),
  ];
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => r[i]?.length ?? 0))) ?? [];
  // Names and kinds to the left, numbers to the right.
  const cell = (text: string, i: number) => (i < 2 ? text.padEnd(widths[i] ?? 0) : text.padStart(widths[i] ?? 0));
  const indent = "".padEnd(16);
  return [
    ...rows.map((r, n) => (n === 0 ? "maps" : "").padEnd(16) + r.map(cell).join("  ").trimEnd()),
    `${indent}a full non-LRU map evicts nothing (inserts fail); the LRU flow tables evict their oldest`,
  ];
}

/** "; refused: 104 over a pod's bound of 4096, 2 from another namespace", when any was. */
function sockRefusals(sb: NodeStatus["sockBypass"]): string {
  const parts = [
    ...(sb.refusedBound > 0 ? [`${sb.refusedBound} over a pod's bound of ${sb.bound}`] : []),
    ...(sb.refusedNetns > 0 ? [`${sb.refusedNetns} from another network namespace`] : []),
  ];
  return parts.length > 0 ? `; refused: ${parts.join(", ")}` : "";
}

export function formatServiceTranslation(s: ServiceTranslationStatus): string {
  if (s.links === 0) return `services        not translated (no pod of a network with "serviceTranslation": true yet)`;
  const c = s.counters;
  const counted = c
    ? `; ${c.translated} translated, ${c.refused} refused (no backend), ${c.reversed} shown back, ${c.unsure} left to the stack`
    : "";
  const line = `services        translated at connect for ${s.pods} pods: ${s.services} Services, ${s.backends} backends${counted}`;
  const lines = [line];
  const p = s.podState;
  if (p) {
    // Each pod's own (a socket's storage, the pod's affinity): nothing one pod fills is
    // another's, so only what was refused or given up is worth a look.
    lines.push(
      `services        pods' own state: affinity to ${p.affinityHeld} Services (at most ${p.affinityPerPod} a pod); ` +
        `refused: ${p.noSocketState} sockets without socket state (left to the stack); ` +
        `given up, each pod its own: ${p.socketReplaced} of a socket's Services, ${p.affinityReplaced} affinities` +
        (p.withoutState > 0 ? `; ${p.withoutState} pods recorded by an older build have no state yet` : ""),
    );
  }
  if (s.socketClosing) {
    lines.push(
      `services        cannot close a withdrawn backend's sockets (the agent refuses --service-translation): ${s.socketClosing}`,
    );
  }
  return lines.join("\n");
}
