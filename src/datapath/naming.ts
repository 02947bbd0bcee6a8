/**
 * Names derived from an attachment (container ID + ifname): the host-side device name,
 * its MAC address and its ownership alias (which also names the network). Derived, never
 * stored, so DEL can find them without state; hashed, so a container ID never becomes
 * part of a name or path as is.
 */

import { MAX_CONTAINER_ID_LENGTH, MAX_IFNAME_LENGTH } from "../cni/env";
import { macText } from "../netlink/attrs";
import { sha256, sha256Hex } from "../sys/sha256";

const HOST_DEVICE_PREFIX = "nk";
const OWNER_ALIAS_PREFIX = "netkit-cni:";
/**
 * A retired device's alias: its owner's, under a prefix of the same length (so whatever
 * owner alias fits, its retired form fits too). A retired device is DEL'd: no owner's any
 * more, and anything of ours may delete it (datapath/retired.ts).
 */
const RETIRED_ALIAS_PREFIX = "netkit-del:";

function digest(containerId: string, ifname: string): Buffer {
  return sha256(`${containerId}\0${ifname}`);
}

/** "nk" + 13 hex digits: 15 characters, the kernel's limit, stable for an attachment. */
export function hostDeviceName(containerId: string, ifname: string): string {
  return HOST_DEVICE_PREFIX + digest(containerId, ifname).toString("hex").slice(0, 13);
}

/** A locally administered unicast MAC for the host side, so the pod can pin its gateway. */
export function hostDeviceMac(containerId: string, ifname: string): string {
  const d = digest(containerId, ifname);
  return macText([0x02, d[20], d[21], d[22], d[23], d[24]] as number[]);
}

/** The pod end's MAC, for device kinds where we choose it (netkit L2). */
export function podDeviceMac(containerId: string, ifname: string): string {
  const d = digest(containerId, ifname);
  return macText([0x02, d[26], d[27], d[28], d[29], d[30]] as number[]);
}

/**
 * The owner alias on the host device, for DEL's safety check, CHECK and GC:
 * `netkit-cni:<network>/<ifname>/<containerID>`. The network is there because two of our
 * networks can share a node (a second interface, podman networks), and each one's GC must
 * tell its own devices from the other's. None of the three parts can hold a '/'.
 * IFLA_IFALIAS holds 255 bytes: with the longest ifname and container ID we accept, the
 * network may take NETWORK_TOKEN_MAX; longer names keep a readable start and a hash.
 */
export const ownerAlias = (network: string, containerId: string, ifname: string) =>
  `${OWNER_ALIAS_PREFIX}${networkToken(network)}/${ifname}/${containerId}`;

const MAX_ALIAS_BYTES = 255;
export const NETWORK_TOKEN_MAX =
  MAX_ALIAS_BYTES - OWNER_ALIAS_PREFIX.length - MAX_IFNAME_LENGTH - MAX_CONTAINER_ID_LENGTH - "//".length;
const NETWORK_HASH_DIGITS = 12;

/** The network as the alias names it: the name itself, or for a long one `<start>~<hash>`. */
export function networkToken(network: string): string {
  if (network.length <= NETWORK_TOKEN_MAX) return network;
  const hash = sha256Hex([network], NETWORK_HASH_DIGITS);
  // '~' cannot occur in a network name, so a hashed token never equals a short name.
  return `${network.slice(0, NETWORK_TOKEN_MAX - NETWORK_HASH_DIGITS - 1)}~${hash}`;
}

export interface Owner {
  /** The network's token (see networkToken). */
  network: string;
  containerId: string;
  ifname: string;
}

/** The owner an alias names; undefined for anything but `netkit-cni:<network>/<ifname>/<containerID>`. */
export function parseOwnerAlias(alias: string | undefined): Owner | undefined {
  if (!alias?.startsWith(OWNER_ALIAS_PREFIX)) return undefined;
  const [network, ifname, containerId, ...rest] = alias.slice(OWNER_ALIAS_PREFIX.length).split("/");
  if (!network || !ifname || !containerId || rest.length > 0) return undefined;
  return { network, ifname, containerId };
}

/** The alias that marks a DEL'd attachment's device retired. */
export const retiredAlias = (network: string, containerId: string, ifname: string) =>
  `${RETIRED_ALIAS_PREFIX}${networkToken(network)}/${ifname}/${containerId}`;

/** The owner a retired device had; undefined for any other alias. */
export function parseRetiredAlias(alias: string | undefined): Owner | undefined {
  if (!alias?.startsWith(RETIRED_ALIAS_PREFIX)) return undefined;
  return parseOwnerAlias(OWNER_ALIAS_PREFIX + alias.slice(RETIRED_ALIAS_PREFIX.length));
}

/** Whether `link` is a device retired by a DEL, named as its attachment's host device. */
export function isRetiredDevice(link: { name: string; alias: string | undefined }): boolean {
  const owner = parseRetiredAlias(link.alias);
  return owner !== undefined && link.name === hostDeviceName(owner.containerId, owner.ifname);
}

/** Whether a device's alias makes it `network`'s attachment (containerId, ifname). */
export function aliasClaims(alias: string | undefined, network: string, containerId: string, ifname: string): boolean {
  const owner = parseOwnerAlias(alias);
  return owner?.network === networkToken(network) && owner.containerId === containerId && owner.ifname === ifname;
}
