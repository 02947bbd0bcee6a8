/**
 * Throwaway network namespaces for the bpf suite, driven by iproute2. Commands run via
 * `nsenter --net=` (not `ip netns exec`, which remounts /sys and hides bpffs pins).
 * Every namespace made here is named with the nkb prefix and removed by destroy().
 */
import { execFileSync } from "node:child_process";

export class TestNetns {
  readonly path: string;

  private constructor(readonly name: string) {
    this.path = `/run/netns/${name}`;
  }

  static create(label: string): TestNetns {
    const name = `nkb-${label}-${process.pid}`;
    try {
      execFileSync("ip", ["netns", "del", name], { stdio: "ignore" });
    } catch {
      // not there: the usual case
    }
    execFileSync("ip", ["netns", "add", name]);
    const ns = new TestNetns(name);
    ns.run("ip", "link", "set", "lo", "up");
    return ns;
  }

  /** Runs a command inside the namespace; returns its stdout. */
  run(...argv: string[]): string {
    return execFileSync("nsenter", [`--net=${this.path}`, ...argv], { encoding: "utf8", stdio: "pipe" });
  }

  ip(...args: string[]): string {
    return this.run("ip", ...args);
  }

  sysctl(key: string, value: string): void {
    this.run("sysctl", "-q", "-w", `${key}=${value}`);
  }

  link(dev: string): { ifindex: number; mac: string } {
    const [info] = JSON.parse(this.ip("-j", "link", "show", "dev", dev)) as { ifindex: number; address: string }[];
    if (!info) throw new Error(`no device ${dev} in ${this.name}`);
    return { ifindex: info.ifindex, mac: info.address };
  }

  destroy(): void {
    try {
      execFileSync("ip", ["netns", "del", this.name], { stdio: "ignore" });
    } catch {
      // already gone
    }
  }
}
