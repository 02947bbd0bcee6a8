/**
 * Is this text an IPv4 / IPv6 address? Pure. Used instead of node:net's isIPv4/isIPv6,
 * whose regular expressions cost ~2 ms to compile on first use: every plugin start pays
 * that, for a question this simple. Zone suffixes ("%eth0") are refused: no address the
 * plugin handles carries one.
 */

const DECIMAL_OCTET = /^(0|[1-9]\d{0,2})$/;
const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;

export function isIPv4(text: string): boolean {
  const parts = text.split(".");
  return parts.length === 4 && parts.every((p) => DECIMAL_OCTET.test(p) && Number(p) <= 255);
}

export function isIPv6(text: string): boolean {
  if (text.length < 2 || text.length > 45) return false;
  let rest = text;
  // A dotted IPv4 tail stands for the last two groups.
  const lastColon = rest.lastIndexOf(":");
  const tail = rest.slice(lastColon + 1);
  if (tail.includes(".")) {
    if (!isIPv4(tail)) return false;
    rest = `${rest.slice(0, lastColon + 1)}0:0`;
  }
  const gap = rest.indexOf("::");
  if (gap === -1) {
    const groups = rest.split(":");
    return groups.length === 8 && groups.every((g) => HEX_GROUP.test(g));
  }
  if (rest.indexOf("::", gap + 1) !== -1) return false;
  const left = rest.slice(0, gap);
  const right = rest.slice(gap + 2);
  const groups = [...(left === "" ? [] : left.split(":")), ...(right === "" ? [] : right.split(":"))];
  return groups.length <= 7 && groups.every((g) => HEX_GROUP.test(g));
}
