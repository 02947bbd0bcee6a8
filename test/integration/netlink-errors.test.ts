/**
 * Kernel errors come back with the kernel's own words (netlink extended acks), which
 * RtnlSocket turns on for each socket it opens, in the host or a pod netns.
 */
import * as fs from "node:fs";
import { afterEach, expect, it } from "vitest";
import { addAddress } from "../../src/netlink/addrs";
import { RtnlSocket } from "../../src/netlink/socket";
import { openNetns } from "../../src/sys/netns";
import { Fixture } from "../support/harness";

let fx: Fixture | undefined;
afterEach(() => fx?.cleanup());

it("reports the extended-ack text of a refused request, from sockets in either namespace", async () => {
  fx = new Fixture();
  const netnsFd = openNetns(`/run/netns/${fx.makeNetns("nkx")}`);
  const sockets = [RtnlSocket.open(), RtnlSocket.open(netnsFd), RtnlSocket.open(netnsFd)];
  try {
    for (const sock of sockets) {
      await expect(addAddress(sock, 999_999, "10.0.0.1", 32)).rejects.toThrow(
        /add address 10\.0\.0\.1\/32: ipv4: Device not found \(ENODEV\)/,
      );
    }
  } finally {
    for (const sock of sockets) sock.close();
    fs.closeSync(netnsFd);
  }
});
