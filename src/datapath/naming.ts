/**
 * Names derived from an attachment (container ID + ifname): the host-side device name,
 * its MAC address and its ownership alias. Derived, never stored, so DEL can find them
 * without state; hashed, so a container ID never becomes part of a name or path as is.
 */
import { createHash } from "node:crypto";

export const HOST_DEVICE_PREFIX = "nk";
export const OWNER_ALIAS_PREFIX = "netkit-cni:";

function digest(containerId: string, ifname: string): Buffer {
  return createHash("sha256").update(`${containerId}\0${ifname}`).digest();
}

/** "nk" + 13 hex digits: 15 characters, the kernel's limit, stable for an attachment. */
export function hostDeviceName(containerId: string, ifname: string): string {
  return HOST_DEVICE_PREFIX + digest(containerId, ifname).toString("hex").slice(0, 13);
}

/** A locally administered unicast MAC for the host side, so the pod can pin its gateway. */
export function hostDeviceMac(containerId: string, ifname: string): string {
  const d = digest(containerId, ifname);
  const bytes = [0x02, d[20], d[21], d[22], d[23], d[24]] as number[];
  return bytes.map((b) => b.toString(16).padStart(2, "0")).join(":");
}

/** The pod end's MAC, for device kinds where we choose it (netkit L2). */
export function podDeviceMac(containerId: string, ifname: string): string {
  const d = digest(containerId, ifname);
  const bytes = [0x02, d[26], d[27], d[28], d[29], d[30]] as number[];
  return bytes.map((b) => b.toString(16).padStart(2, "0")).join(":");
}

/** The alias written on the host device: who owns it, for GC and for DEL's safety check. */
export const ownerAlias = (containerId: string, ifname: string) => `${OWNER_ALIAS_PREFIX}${ifname}/${containerId}`;

export function parseOwnerAlias(alias: string | undefined): { containerId: string; ifname: string } | undefined {
  if (!alias?.startsWith(OWNER_ALIAS_PREFIX)) return undefined;
  const rest = alias.slice(OWNER_ALIAS_PREFIX.length);
  const slash = rest.indexOf("/");
  if (slash <= 0) return undefined;
  return { ifname: rest.slice(0, slash), containerId: rest.slice(slash + 1) };
}
