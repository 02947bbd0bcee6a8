/** Reading back both ends of a pair right after a datapath created it. */
import { CniError, ErrorCode } from "../cni/errors";
import { getLinkByName } from "../netlink/links";
import type { DeviceKind, DevicePair, Endpoint, Namespaces } from "./types";

export async function readPair(ns: Namespaces, ep: Endpoint, kind: DeviceKind): Promise<DevicePair> {
  const hostLink = await getLinkByName(ns.host, ep.hostDevice);
  const podLink = await getLinkByName(ns.pod, ep.ifname);
  if (!hostLink || !podLink) {
    throw new CniError(
      ErrorCode.DatapathFailure,
      `${kind} pair ${ep.hostDevice}/${ep.ifname} vanished right after creation`,
    );
  }
  return { hostLink, podLink };
}
