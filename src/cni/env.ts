/**
 * The CNI_* environment variables a runtime sets, parsed and validated into a typed
 * `CniEnv`. Validation follows the spec's rules for container IDs and interface names;
 * nothing here touches the system.
 */
import { invalidEnv } from "./errors";
import type { Verb } from "./version";

const VERBS: readonly Verb[] = ["ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION"];

export interface CniEnv {
  command: Verb;
  containerId: string;
  /** Path of the pod's network namespace; "" when a DEL arrives after it is gone. */
  netns: string;
  ifname: string;
  /** CNI_ARGS as key/value pairs (K8S_POD_NAME=…;K8S_POD_NAMESPACE=…). */
  args: Record<string, string>;
  /** Directories searched for delegated plugins (IPAM). */
  path: string[];
}

/** Spec: starts alphanumeric, then alphanumerics, `_`, `.`, `-`. */
const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
// Kubernetes runtimes send 64 hex digits; the cap keeps the ownership alias (IFALIASZ 256) whole.
export const MAX_CONTAINER_ID_LENGTH = 200;
export const MAX_IFNAME_LENGTH = 15;

export function validateContainerId(id: string): void {
  if (id === "") throw invalidEnv("CNI_CONTAINERID is required");
  if (id.length > MAX_CONTAINER_ID_LENGTH) {
    throw invalidEnv(`CNI_CONTAINERID is ${id.length} characters long; at most ${MAX_CONTAINER_ID_LENGTH} allowed`);
  }
  if (!CONTAINER_ID.test(id)) {
    throw invalidEnv(
      "CNI_CONTAINERID has invalid characters",
      "it must start with a letter or digit followed by letters, digits, '_', '.' or '-'",
    );
  }
}

const isControlCharacter = (c: string) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f;

/**
 * Why the kernel would refuse `name` as a device name, or undefined if it would take it:
 * dev_valid_name's rules (which the spec adopts), and no '%', which makes a name a
 * template the kernel fills in (dev_alloc_name: "net%d" becomes "net0"), so the pod's
 * device would not be called what the runtime asked for.
 */
export function ifnameProblem(name: string): string | undefined {
  if (name === "") return "CNI_IFNAME is required";
  if (Buffer.byteLength(name) > MAX_IFNAME_LENGTH) {
    return `CNI_IFNAME "${name}" is longer than ${MAX_IFNAME_LENGTH} bytes`;
  }
  if (name === "." || name === "..") return `CNI_IFNAME "${name}" is not a valid interface name`;
  if (/[/:\s]/.test(name)) return `CNI_IFNAME "${name}" contains '/', ':' or whitespace`;
  if (name.includes("%")) return `CNI_IFNAME "${name}" contains '%': the kernel would take it as a name template`;
  // The kernel would take these, but no runtime means them: they only garble the alias and logs.
  if ([...name].some(isControlCharacter)) return `CNI_IFNAME "${name}" contains control characters`;
  return undefined;
}

export function validateIfname(name: string): void {
  const problem = ifnameProblem(name);
  if (problem) throw invalidEnv(problem);
}

function validateNetns(path: string): void {
  if (!path.startsWith("/")) throw invalidEnv(`CNI_NETNS "${path}" is not an absolute path`);
  if (path.includes("\0")) throw invalidEnv("CNI_NETNS contains a NUL byte");
}

export function parseCniArgs(raw: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of raw.split(";")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq <= 0) throw invalidEnv(`CNI_ARGS entry "${pair}" is not KEY=VALUE`);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

/** Which variables each verb requires (spec, "Parameters"). */
const REQUIRED: Record<Verb, readonly string[]> = {
  ADD: ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
  CHECK: ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
  DEL: ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
  GC: ["CNI_PATH"],
  STATUS: ["CNI_PATH"],
  VERSION: [],
};

export function parseVerb(raw: string | undefined): Verb {
  if (raw === undefined || raw === "") throw invalidEnv("CNI_COMMAND is required");
  if (!(VERBS as readonly string[]).includes(raw)) {
    throw invalidEnv(`CNI_COMMAND "${raw}" is not one of ${VERBS.join(", ")}`);
  }
  return raw as Verb;
}

export function parseEnv(env: NodeJS.ProcessEnv): CniEnv {
  const command = parseVerb(env.CNI_COMMAND);
  // VERSION needs nothing else, and libcni sends it with placeholders ("dummy") that are
  // no valid paths: judging them would make podman drop our network.
  if (command === "VERSION") return { command, containerId: "", netns: "", ifname: "", args: {}, path: [] };
  for (const name of REQUIRED[command]) {
    if (!env[name]) throw invalidEnv(`${name} is required for ${command}`);
  }
  const containerId = env.CNI_CONTAINERID ?? "";
  const ifname = env.CNI_IFNAME ?? "";
  const netns = env.CNI_NETNS ?? "";
  if (REQUIRED[command].includes("CNI_CONTAINERID")) validateContainerId(containerId);
  // DEL judges the name itself (commands/del.ts): one the kernel refuses made nothing to delete.
  if (command === "ADD" || command === "CHECK") validateIfname(ifname);
  if (netns !== "") validateNetns(netns);
  return {
    command,
    containerId,
    netns,
    ifname,
    args: parseCniArgs(env.CNI_ARGS ?? ""),
    path: (env.CNI_PATH ?? "").split(":").filter((p) => p !== ""),
  };
}
