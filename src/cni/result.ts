/**
 * The CNI result: one internal shape (the 1.1.0 one), parsed from any supported version
 * (IPAM plugin output, prevResult) and rendered for the version the runtime asked for.
 * Version differences handled here: before 1.0.0 every IP carries `version: "4"|"6"`;
 * route attributes mtu/advmss/priority/table/scope exist from 1.1.0 only.
 */
import { addressFamily, ipVersion, isCidr, parseCidr } from "./address";
import { CniError, ErrorCode } from "./errors";
import { type CniVersion, compareVersions } from "./version";

export interface Interface {
  name: string;
  mac?: string;
  mtu?: number;
  /** Netns path for interfaces inside the container; absent for host-side ones. */
  sandbox?: string;
}

export interface IpConfig {
  /** CIDR, e.g. "10.1.0.5/24". */
  address: string;
  gateway?: string;
  /** Index into `interfaces`. */
  interface?: number;
}

export interface RouteConfig {
  dst: string;
  gw?: string;
  mtu?: number;
  advmss?: number;
  priority?: number;
  table?: number;
  scope?: number;
}

export interface Dns {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

export interface Result {
  interfaces: Interface[];
  ips: IpConfig[];
  routes: RouteConfig[];
  dns: Dns;
}

export const emptyResult = (): Result => ({ interfaces: [], ips: [], routes: [], dns: {} });

const decodeError = (msg: string) => new CniError(ErrorCode.DecodeFailure, msg);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function optionalString(o: Record<string, unknown>, key: string, where: string): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw decodeError(`${where}.${key} must be a string`);
  return v;
}

function optionalNumber(o: Record<string, unknown>, key: string, where: string): number | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v)) throw decodeError(`${where}.${key} must be an integer`);
  return v;
}

function stringList(o: Record<string, unknown>, key: string, where: string): string[] | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || v.some((s) => typeof s !== "string")) {
    throw decodeError(`${where}.${key} must be a list of strings`);
  }
  return v as string[];
}

/** Parses a result of any supported version (an IPAM plugin's output or a prevResult). */
export function parseResult(raw: unknown, where = "result"): Result {
  if (!isRecord(raw)) throw decodeError(`${where} must be a JSON object`);
  const result = emptyResult();
  const interfaces = raw.interfaces ?? [];
  if (!Array.isArray(interfaces)) throw decodeError(`${where}.interfaces must be a list`);
  for (const [i, item] of interfaces.entries()) {
    if (!isRecord(item)) throw decodeError(`${where}.interfaces[${i}] must be an object`);
    const name = optionalString(item, "name", `${where}.interfaces[${i}]`);
    if (!name) throw decodeError(`${where}.interfaces[${i}].name is required`);
    const iface: Interface = { name };
    const mac = optionalString(item, "mac", `${where}.interfaces[${i}]`);
    const sandbox = optionalString(item, "sandbox", `${where}.interfaces[${i}]`);
    const mtu = optionalNumber(item, "mtu", `${where}.interfaces[${i}]`);
    if (mac) iface.mac = mac;
    if (sandbox) iface.sandbox = sandbox;
    if (mtu) iface.mtu = mtu;
    result.interfaces.push(iface);
  }
  const ips = raw.ips ?? [];
  if (!Array.isArray(ips)) throw decodeError(`${where}.ips must be a list`);
  for (const [i, item] of ips.entries()) {
    const at = `${where}.ips[${i}]`;
    if (!isRecord(item)) throw decodeError(`${at} must be an object`);
    const address = optionalString(item, "address", at);
    if (!address || !isCidr(address)) throw decodeError(`${at}.address must be an IP address in CIDR form`);
    const ip: IpConfig = { address };
    const gateway = optionalString(item, "gateway", at);
    if (gateway) {
      if (addressFamily(gateway) === undefined) throw decodeError(`${at}.gateway must be an IP address`);
      ip.gateway = gateway;
    }
    const iface = optionalNumber(item, "interface", at);
    if (iface !== undefined) ip.interface = iface;
    result.ips.push(ip);
  }
  result.routes = parseRoutes(raw.routes, `${where}.routes`);
  if (isRecord(raw.dns)) result.dns = parseDns(raw.dns, `${where}.dns`);
  return result;
}

export function parseRoutes(raw: unknown, where: string): RouteConfig[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw decodeError(`${where} must be a list`);
  return raw.map((item, i) => {
    const at = `${where}[${i}]`;
    if (!isRecord(item)) throw decodeError(`${at} must be an object`);
    const dst = optionalString(item, "dst", at);
    if (!dst || !isCidr(dst)) throw decodeError(`${at}.dst must be a CIDR`);
    const route: RouteConfig = { dst };
    const gw = optionalString(item, "gw", at);
    if (gw) route.gw = gw;
    for (const key of ["mtu", "advmss", "priority", "table", "scope"] as const) {
      const v = optionalNumber(item, key, at);
      if (v !== undefined) route[key] = v;
    }
    return route;
  });
}

export function parseDns(raw: Record<string, unknown>, where: string): Dns {
  const dns: Dns = {};
  const nameservers = stringList(raw, "nameservers", where);
  const domain = optionalString(raw, "domain", where);
  const search = stringList(raw, "search", where);
  const options = stringList(raw, "options", where);
  if (nameservers) dns.nameservers = nameservers;
  if (domain) dns.domain = domain;
  if (search) dns.search = search;
  if (options) dns.options = options;
  return dns;
}

/** Renders a result as the JSON object of spec version `version`. */
export function renderResult(result: Result, version: CniVersion): Record<string, unknown> {
  const legacy = compareVersions(version, "1.0.0") < 0;
  const routeExtras = compareVersions(version, "1.1.0") >= 0;
  const out: Record<string, unknown> = {
    cniVersion: version,
    interfaces: result.interfaces.map((i) => ({ ...i })),
    ips: result.ips.map((ip) =>
      legacy ? { version: `${ipVersion(parseCidr(ip.address).family)}`, ...ip } : { ...ip },
    ),
  };
  if (!routeExtras) {
    for (const iface of out.interfaces as Interface[]) delete iface.mtu;
  }
  if (result.routes.length > 0) {
    out.routes = result.routes.map((r) => (routeExtras ? { ...r } : { dst: r.dst, ...(r.gw ? { gw: r.gw } : {}) }));
  }
  if (Object.keys(result.dns).length > 0) out.dns = { ...result.dns };
  return out;
}
