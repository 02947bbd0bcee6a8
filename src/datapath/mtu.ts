/** The MTU pods get when the config sets none: that of the node's default-route device. */
import { getLinkByIndex } from "../netlink/links";
import { listRoutes } from "../netlink/routes";
import type { RtnlSocket } from "../netlink/socket";

export const FALLBACK_MTU = 1500;

export async function defaultRouteMtu(host: RtnlSocket): Promise<number> {
  const routes = await listRoutes(host);
  const dflt = routes.find((r) => r.dst === "0.0.0.0/0") ?? routes.find((r) => r.dst === "::/0");
  if (!dflt?.ifindex) return FALLBACK_MTU;
  return (await getLinkByIndex(host, dflt.ifindex))?.mtu ?? FALLBACK_MTU;
}
