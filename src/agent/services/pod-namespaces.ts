/**
 * Finding pods' network namespaces by their cookies: the plugin records a translating
 * pod's namespace as a cookie (bpf/svc.ts), and closing a socket needs the namespace
 * itself (a socket iterator walks the namespace it is created in). Runtimes keep a pod's
 * namespace as a file under /run/netns (containerd's and CRI-O's cni-<id>, ip-netns'
 * names); each is opened and asked its cookie.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { RtnlSocket } from "../../netlink/socket";
import { openNetns } from "../../sys/netns";

export const NETNS_DIRS = ["/run/netns", "/var/run/netns"];

/** The namespace files whose cookie is one of `cookies`, one path per namespace. */
export function namespacesWithCookies(cookies: ReadonlySet<bigint>, dirs: readonly string[] = NETNS_DIRS): string[] {
  const found = new Map<bigint, string>();
  const seen = new Set<string>();
  for (const dir of dirs) {
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) {
      const file = path.join(dir, name);
      let fd: number;
      try {
        const real = fs.realpathSync(file);
        if (seen.has(real)) continue;
        seen.add(real);
        fd = openNetns(file);
      } catch {
        continue; // not a namespace, or gone
      }
      try {
        const socket = RtnlSocket.open(fd);
        try {
          const cookie = socket.netnsCookie();
          if (cookies.has(cookie) && !found.has(cookie)) found.set(cookie, file);
        } finally {
          socket.close();
        }
      } catch {
        // a namespace being torn down
      } finally {
        fs.closeSync(fd);
      }
    }
  }
  return [...found.values()];
}
