/**
 * Child process for the IPAM concurrency tests, bundled with esbuild at test time:
 *   node worker.js <ipam JSON> <network> <container ID prefix> <count> <lock timeout ms>
 * Allocates <count> attachments (<prefix>-<i>/eth0) one after another and prints the
 * addresses as one JSON list, or the CniError as {code, msg} with exit code 1.
 */
import { CniError } from "../../../src/cni/errors";
import { allocate, parseIpamConfig } from "../../../src/ipam/index";

const [ipamJson = "{}", network = "", prefix = "", count = "0", timeout = "10000"] = process.argv.slice(2);
try {
  const cfg = parseIpamConfig(JSON.parse(ipamJson), network, { lockTimeoutMs: Number(timeout) });
  const ips: string[] = [];
  for (let i = 0; i < Number(count); i++) {
    for (const ip of allocate(cfg, `${prefix}-${i}`, "eth0").ips) ips.push(ip.address);
  }
  process.stdout.write(JSON.stringify(ips));
} catch (e) {
  const err = e instanceof CniError ? e : new CniError(999, String(e));
  process.stdout.write(JSON.stringify({ code: err.code, msg: err.message }));
  process.exitCode = 1;
}
