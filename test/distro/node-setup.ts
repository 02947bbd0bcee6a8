/**
 * The distro lane's node, as kube-proxy leaves one: nf_conntrack loaded (its iptables
 * rules load it at start), before any pod's first ADD lets `natCheck: "auto"` choose.
 * Runs once, before the lane's files (vitest globalSetup).
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";

export default function setup(): void {
  if (!fs.existsSync("/sys/module/nf_conntrack")) execFileSync("modprobe", ["nf_conntrack"]);
}
