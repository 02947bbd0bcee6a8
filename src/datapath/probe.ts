/**
 * Does this kernel have netkit? Asked once per boot and remembered in a file under
 * /run, because every `auto` ADD needs the answer. The question is put without creating
 * anything: an RTM_NEWLINK of kind "netkit" with an MTU no device accepts is refused
 * either as an unknown kind (EOPNOTSUPP: no netkit) or as a bad MTU (EINVAL: netkit is
 * there).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { attrU32 } from "../netlink/attrs";
import { deleteLinkByName, newPairMessage } from "../netlink/links";
import { NetlinkError, NLM_F_CREATE, NLM_F_EXCL, type RtnlSocket } from "../netlink/socket";
import { mkdirs } from "../sys/mkdirs";

const CACHE_FILE = "/run/netkit-cni/kernel-features.json";
const RTM_NEWLINK = 16;
const IFLA_MTU = 4;
const EOPNOTSUPP = 95;

interface FeatureCache {
  bootId: string;
  netkit: boolean;
}

const bootId = () => fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();

export async function kernelHasNetkit(host: RtnlSocket): Promise<boolean> {
  const boot = bootId();
  try {
    const cached = JSON.parse(fs.readFileSync(CACHE_FILE, "utf8")) as FeatureCache;
    if (cached.bootId === boot && typeof cached.netkit === "boolean") return cached.netkit;
  } catch {
    // No cache yet, or from an older boot: ask the kernel.
  }
  const netkit = await askKernel(host);
  try {
    mkdirs(path.dirname(CACHE_FILE), 0o700);
    const tmp = `${CACHE_FILE}.${process.pid}`;
    fs.writeFileSync(tmp, JSON.stringify({ bootId: boot, netkit } satisfies FeatureCache), { mode: 0o600 });
    fs.renameSync(tmp, CACHE_FILE);
  } catch {
    // Only a cache: the next ADD asks again.
  }
  return netkit;
}

async function askKernel(host: RtnlSocket): Promise<boolean> {
  const probe = newPairMessage("netkit", { name: "nkprobe0" }, { name: "nkprobe1" }, undefined, []);
  const message = Buffer.concat([probe, attrU32(IFLA_MTU, 1)]);
  try {
    await host.request("probe netkit", RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, message);
  } catch (e) {
    if (e instanceof NetlinkError) return e.errno !== EOPNOTSUPP;
    throw e;
  }
  // Accepted after all (should not happen): remove what was made and report support.
  await deleteLinkByName(host, "nkprobe0");
  return true;
}
