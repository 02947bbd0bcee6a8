/**
 * The embedded IPAM's configuration: the `ipam` object of the network configuration, in
 * host-local's shape (`ranges` as a list of range sets, or the legacy single range at the
 * top level), parsed into canonical ranges with host-local's defaults filled in.
 * Owns validation: everything the allocator relies on (families agree, ranges inside
 * their subnet, no overlaps, at least one allocatable address) is checked here and
 * rejected with code 7 and a message naming the field. Never touches the disk.
 */
import * as path from "node:path";
import {
  type Address,
  AF_INET,
  addressBits,
  type Family,
  formatAddress,
  formatSubnet,
  ipVersion,
  lastAddress,
  parseAddress,
  parseSubnet,
  type Subnet,
  subnetContains,
} from "../cni/address";
import type { IpamConf } from "../cni/config";
import { CniError, invalidConfig } from "../cni/errors";
import { type Dns, parseDns, parseRoutes, type RouteConfig } from "../cni/result";
import { capacity, formatRange, type IpRange } from "./ranges";

/** The `ipam.type` that selects this allocator instead of exec'ing a plugin. */
export const EMBEDDED_IPAM_TYPE = "netkit-cni";
/** host-local's default, so both find the same store. */
export const DEFAULT_DATA_DIR = "/var/lib/cni/networks";
export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;

/** One address is allocated per range set, from any of its ranges. */
export interface RangeSet {
  family: Family;
  ranges: IpRange[];
}

export interface EmbeddedIpamConfig {
  networkName: string;
  dataDir: string;
  /** `<dataDir>/<networkName>`: where reservations, last_reserved_ip.N and the lock live. */
  storeDir: string;
  rangeSets: RangeSet[];
  routes: RouteConfig[];
  dns: Dns;
  /** How long to wait for the store lock before answering "try again later". */
  lockTimeoutMs: number;
}

export interface ParseOptions {
  lockTimeoutMs?: number;
}

/** Same rule as cni/config.ts; repeated because the name becomes a directory name here. */
const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function isEmbeddedIpam(ipam: IpamConf | undefined): boolean {
  return ipam?.type === EMBEDDED_IPAM_TYPE;
}

export function parseIpamConfig(ipam: IpamConf, networkName: string, options: ParseOptions = {}): EmbeddedIpamConfig {
  if (!NETWORK_NAME.test(networkName)) {
    throw invalidConfig(`network name "${networkName}" cannot name an IPAM store directory`);
  }
  const dataDir = parseDataDir(ipam.dataDir);
  const rangeSets = parseRangeSets(ipam);
  checkOverlaps(rangeSets);
  const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  if (!Number.isFinite(lockTimeoutMs) || lockTimeoutMs < 0) {
    throw invalidConfig(`IPAM lock timeout must be a non-negative number of milliseconds; got ${lockTimeoutMs}`);
  }
  return {
    networkName,
    dataDir,
    storeDir: path.join(dataDir, networkName),
    rangeSets,
    routes: parseIpamRoutes(ipam.routes),
    dns: parseIpamDns(ipam.dns),
    lockTimeoutMs,
  };
}

function parseDataDir(raw: unknown): string {
  if (raw === undefined || raw === null) return DEFAULT_DATA_DIR;
  if (typeof raw !== "string" || !path.isAbsolute(raw) || raw.includes("\0")) {
    throw invalidConfig(`"ipam.dataDir" must be an absolute path; got ${JSON.stringify(raw)}`);
  }
  return path.normalize(raw);
}

function parseRangeSets(ipam: IpamConf): RangeSet[] {
  if (ipam.resolvConf !== undefined) {
    // Silently ignoring it would leave pods without the DNS the admin asked for.
    throw invalidConfig(`"ipam.resolvConf" is not supported by the embedded IPAM; give "ipam.dns" instead`);
  }
  const sets: RangeSet[] = [];
  // host-local's backwards compatibility: a top-level subnet is one more range set, first.
  if (ipam.subnet !== undefined) {
    const range = parseRange(ipam, "ipam");
    sets.push({ family: range.subnet.family, ranges: [range] });
  } else {
    for (const key of ["rangeStart", "rangeEnd", "gateway"]) {
      if (ipam[key] !== undefined) throw invalidConfig(`"ipam.${key}" is given without "ipam.subnet"`);
    }
  }
  const raw = ipam.ranges;
  if (raw !== undefined && raw !== null) {
    if (!Array.isArray(raw)) throw invalidConfig(`"ipam.ranges" must be a list of range sets`);
    for (const [i, set] of raw.entries()) {
      const at = `ipam.ranges[${i}]`;
      if (!Array.isArray(set) || set.length === 0) {
        throw invalidConfig(`"${at}" must be a non-empty list of ranges`);
      }
      const ranges = set.map((r, j) => {
        if (!isRecord(r)) throw invalidConfig(`"${at}[${j}]" must be an object`);
        return parseRange(r, `${at}[${j}]`);
      });
      const family = ranges[0]?.subnet.family ?? AF_INET;
      const other = ranges.findIndex((r) => r.subnet.family !== family);
      if (other !== -1) {
        const otherFamily = ranges[other]?.subnet.family ?? family;
        throw invalidConfig(`"${at}" mixes IPv${ipVersion(family)} and IPv${ipVersion(otherFamily)} ranges`);
      }
      sets.push({ family, ranges });
    }
  }
  if (sets.length === 0) {
    throw invalidConfig(`"ipam.ranges" must hold at least one range set (or give "ipam.subnet")`);
  }
  return sets;
}

function parseRange(raw: Record<string, unknown>, at: string): IpRange {
  const subnet = parseRangeSubnet(raw.subnet, at);
  const { family, network } = subnet;
  const last = lastAddress(subnet);
  const broadcast = family === AF_INET ? last : undefined;
  const inSubnet = (key: string): Address | undefined => {
    const v = raw[key];
    if (v === undefined || v === null) return undefined;
    const addr = typeof v === "string" ? parseAddress(v) : undefined;
    if (!addr) throw invalidConfig(`"${at}.${key}" must be an IP address; got ${JSON.stringify(v)}`);
    if (addr.family !== family) {
      throw invalidConfig(`"${at}.${key}" ${v} is not an IPv${ipVersion(family)} address like its subnet`);
    }
    if (key !== "gateway" && !subnetContains(subnet, addr)) {
      throw invalidConfig(`"${at}.${key}" ${v} is not in subnet ${formatSubnet(subnet)}`);
    }
    return addr;
  };
  const gateway = inSubnet("gateway")?.value ?? network + 1n;
  const startAddr = inSubnet("rangeStart");
  const endAddr = inSubnet("rangeEnd");
  if (startAddr?.value === network) {
    throw invalidConfig(`"${at}.rangeStart" ${raw.rangeStart} is the network address of ${formatSubnet(subnet)}`);
  }
  if (endAddr !== undefined && endAddr.value === broadcast) {
    throw invalidConfig(`"${at}.rangeEnd" ${raw.rangeEnd} is the broadcast address of ${formatSubnet(subnet)}`);
  }
  // host-local's defaults: from network+1 (the gateway, when it is there, is skipped
  // while allocating) to the address before the IPv4 broadcast, or the last IPv6 one.
  const start = startAddr?.value ?? network + 1n;
  const end = endAddr?.value ?? (broadcast !== undefined ? broadcast - 1n : last);
  if (start > end) {
    throw invalidConfig(
      `"${at}.rangeStart" ${formatAddress(family, start)} is after "${at}.rangeEnd" ${formatAddress(family, end)}`,
    );
  }
  const range: IpRange = { subnet, start, end, gateway };
  if (capacity(range) < 1n) {
    throw invalidConfig(`"${at}" (${formatRange(range)}) holds no address besides its gateway`);
  }
  return range;
}

function parseRangeSubnet(raw: unknown, at: string): Subnet {
  if (raw === undefined || raw === null || raw === "") throw invalidConfig(`"${at}.subnet" is required`);
  const parsed = typeof raw === "string" ? parseSubnet(raw) : ({ ok: false, why: "syntax" } as const);
  if (!parsed.ok) {
    if (parsed.why === "host-bits") {
      throw invalidConfig(`"${at}.subnet" ${raw} has host bits set; the network address is ${parsed.network}`);
    }
    throw invalidConfig(`"${at}.subnet" must be a CIDR like 10.1.0.0/24; got ${JSON.stringify(raw)}`);
  }
  const { subnet } = parsed;
  // Like host-local: a /31 or /32 (/127, /128) has no address besides network and peer.
  if (subnet.prefixLength > addressBits(subnet.family) - 2) {
    throw invalidConfig(`"${at}.subnet" ${raw} is too small to allocate from`);
  }
  return subnet;
}

/** Two ranges overlap if they share an address, within one range set or across sets. */
function checkOverlaps(sets: RangeSet[]): void {
  const all = sets.flatMap((set, i) => set.ranges.map((range, j) => ({ range, name: `range set ${i} range ${j}` })));
  for (const [a, x] of all.entries()) {
    for (const y of all.slice(a + 1)) {
      const r = x.range;
      const s = y.range;
      if (r.subnet.family === s.subnet.family && r.start <= s.end && s.start <= r.end) {
        throw invalidConfig(`"ipam.ranges": ${y.name} (${formatRange(s)}) overlaps ${x.name} (${formatRange(r)})`);
      }
    }
  }
}

function parseIpamRoutes(raw: unknown): RouteConfig[] {
  let routes: RouteConfig[];
  try {
    routes = parseRoutes(raw, "ipam.routes");
  } catch (e) {
    // Shared with result parsing, where the code is 6; here it is configuration. Its
    // messages start with the field's path ("ipam.routes[0].dst must ..."): quote it.
    if (e instanceof CniError) throw invalidConfig(`"${e.message.replace(/^(\S+)/, '$1"')}`);
    throw e;
  }
  for (const [i, r] of routes.entries()) {
    if (r.gw !== undefined && !parseAddress(r.gw)) {
      throw invalidConfig(`"ipam.routes[${i}].gw" must be an IP address; got ${JSON.stringify(r.gw)}`);
    }
  }
  return routes;
}

function parseIpamDns(raw: unknown): Dns {
  if (raw === undefined || raw === null) return {};
  if (!isRecord(raw)) throw invalidConfig(`"ipam.dns" must be an object`);
  try {
    return parseDns(raw, "ipam.dns");
  } catch (e) {
    if (e instanceof CniError) throw invalidConfig(`"${e.message.replace(/^(\S+)/, '$1"')}`);
    throw e;
  }
}
