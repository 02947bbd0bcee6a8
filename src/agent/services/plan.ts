/**
 * Which Services this node translates, and to which backends: pure, from the API's
 * Services and EndpointSlices and this node's name, the entries the Service tables
 * should hold (bpf/svc-table.ts). The rules are kube-proxy's, so that a pod sees the same
 * Service either way:
 *
 * - every ClusterIP of a Service (both families of a dual-stack one) and every TCP or UDP
 *   port; ExternalName and headless Services have none, and are not translated;
 * - the backends are the endpoints of the Service's slices (label
 *   kubernetes.io/service-name, same namespace, the ClusterIP's address family), on the
 *   slice port of the Service port's name and protocol (named and numeric targetPorts
 *   alike: the slice says the number);
 * - ready endpoints (conditions.ready unset counts as ready); when none is ready, those
 *   serving while terminating, as kube-proxy falls back to them;
 * - internalTrafficPolicy Local: only endpoints on this node;
 * - sessionAffinity ClientIP: held for sessionAffinityConfig.clientIP.timeoutSeconds
 *   (10800 unless set).
 *
 * A Service, port or endpoint it cannot read (an unknown protocol, a port without a
 * number, an address of another family or none) is skipped and counted by reason; it
 * never stops the rest.
 */
import type { V1EndpointSlice, V1Service } from "@kubernetes/client-node";
import type { ServiceEntry, SvcBackend, SvcProtocol } from "../../bpf/index";
import { AF_INET, addressFamily } from "../../cni/address";

export const SERVICE_NAME_LABEL = "kubernetes.io/service-name";

/** What the planner reads of a Service and an EndpointSlice (kube/objects.ts keeps these). */
export type ServiceObject = Pick<V1Service, "metadata" | "spec">;
export type SliceObject = Pick<V1EndpointSlice, "metadata" | "addressType" | "ports" | "endpoints">;
const DEFAULT_AFFINITY_SECONDS = 10800;
const MAX_AFFINITY_SECONDS = 86400;

export type SkipReason = "protocol" | "port" | "address" | "affinity";

export interface ServicePlan {
  entries: ServiceEntry[];
  /** What was skipped, by reason (each: Service ports or endpoints left out). */
  skipped: Record<SkipReason, number>;
}

/** The slice addressType of `ip`'s family, or undefined when it is no address. */
const familyOf = (ip: string): "IPv4" | "IPv6" | undefined => {
  const family = addressFamily(ip);
  return family === undefined ? undefined : family === AF_INET ? "IPv4" : "IPv6";
};

export function planServices(
  services: Iterable<ServiceObject>,
  slices: Iterable<SliceObject>,
  nodeName: string,
): ServicePlan {
  const skipped: Record<SkipReason, number> = { protocol: 0, port: 0, address: 0, affinity: 0 };
  const slicesOf = new Map<string, SliceObject[]>();
  for (const slice of slices) {
    const name = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
    if (!name) continue;
    const key = `${slice.metadata?.namespace ?? ""}/${name}`;
    slicesOf.set(key, [...(slicesOf.get(key) ?? []), slice]);
  }
  const entries: ServiceEntry[] = [];
  for (const svc of services) {
    const spec = svc.spec;
    if (!spec || spec.type === "ExternalName") continue;
    const clusterIps = (spec.clusterIPs ?? (spec.clusterIP ? [spec.clusterIP] : [])).filter((ip) => ip !== "None");
    if (clusterIps.length === 0) continue;
    const affinitySeconds = affinityOf(svc, skipped);
    const local = spec.internalTrafficPolicy === "Local";
    const own = slicesOf.get(`${svc.metadata?.namespace ?? ""}/${svc.metadata?.name ?? ""}`) ?? [];
    for (const ip of clusterIps) {
      const family = familyOf(ip);
      if (!family) {
        skipped.address += 1;
        continue;
      }
      for (const port of spec.ports ?? []) {
        const protocol = (port.protocol ?? "TCP") as string;
        if (protocol !== "TCP" && protocol !== "UDP") {
          skipped.protocol += 1;
          continue;
        }
        if (!validPort(port.port)) {
          skipped.port += 1;
          continue;
        }
        const backends = backendsOf(own, family, port.name ?? "", protocol, local ? nodeName : undefined, skipped);
        entries.push({
          frontend: { ip, port: port.port, protocol: protocol as SvcProtocol },
          backends,
          ...(affinitySeconds !== undefined ? { affinitySeconds } : {}),
        });
      }
    }
  }
  return { entries, skipped };
}

function affinityOf(svc: ServiceObject, skipped: Record<SkipReason, number>): number | undefined {
  if (svc.spec?.sessionAffinity !== "ClientIP") return undefined;
  const t = svc.spec.sessionAffinityConfig?.clientIP?.timeoutSeconds;
  if (t === undefined || t === null) return DEFAULT_AFFINITY_SECONDS;
  if (!Number.isInteger(t) || t <= 0 || t > MAX_AFFINITY_SECONDS) {
    skipped.affinity += 1;
    return DEFAULT_AFFINITY_SECONDS;
  }
  return t;
}

const validPort = (n: unknown): n is number => typeof n === "number" && Number.isInteger(n) && n > 0 && n < 65536;

/** The Service port's backends: ready endpoints, else serving-and-terminating ones. */
function backendsOf(
  slices: readonly SliceObject[],
  family: "IPv4" | "IPv6",
  portName: string,
  protocol: string,
  onlyNode: string | undefined,
  skipped: Record<SkipReason, number>,
): SvcBackend[] {
  const ready: SvcBackend[] = [];
  const terminating: SvcBackend[] = [];
  for (const slice of slices) {
    if (slice.addressType !== family) continue;
    const port = (slice.ports ?? []).find((p) => (p.name ?? "") === portName && (p.protocol ?? "TCP") === protocol);
    if (!port) continue;
    if (!validPort(port.port)) {
      skipped.port += 1;
      continue;
    }
    for (const ep of slice.endpoints ?? []) {
      if (onlyNode !== undefined && ep.nodeName !== onlyNode) continue;
      // Every address of an endpoint is the same backend (the API says they are fungible):
      // the first, as kube-proxy takes it.
      const ip = ep.addresses?.[0];
      if (!ip || familyOf(ip) !== family) {
        skipped.address += 1;
        continue;
      }
      const c = ep.conditions ?? {};
      if (c.ready !== false) ready.push({ ip, port: port.port });
      else if (c.serving === true && c.terminating === true) terminating.push({ ip, port: port.port });
    }
  }
  return ready.length > 0 ? ready : terminating;
}
