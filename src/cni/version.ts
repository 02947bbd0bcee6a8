/**
 * Spec versions we speak and which verbs each allows. VERSION answers with this list;
 * every other verb checks the config's cniVersion against it first.
 */
import { CniError, ErrorCode } from "./errors";

export const SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] as const;
export type CniVersion = (typeof SUPPORTED_VERSIONS)[number];
export const LATEST_VERSION: CniVersion = "1.1.0";

export type Verb = "ADD" | "DEL" | "CHECK" | "GC" | "STATUS" | "VERSION";

/** The version a config's raw "cniVersion" names, or the latest where it names none: what
 * VERSION answers in, an error is rendered in, and a handed-over verb is answered in. */
export const versionNamed = (cniVersion: unknown): string =>
  typeof cniVersion === "string" && cniVersion !== "" ? cniVersion : LATEST_VERSION;

export const isSupportedVersion = (v: unknown): v is CniVersion =>
  typeof v === "string" && (SUPPORTED_VERSIONS as readonly string[]).includes(v);

/** Compares dotted versions numerically: -1, 0, 1. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return 0;
}

/** The first spec version that defines each verb. */
const VERB_SINCE: Record<Verb, string> = {
  ADD: "0.1.0",
  DEL: "0.1.0",
  VERSION: "0.1.0",
  CHECK: "0.4.0",
  GC: "1.1.0",
  STATUS: "1.1.0",
};

export function requireVerbInVersion(verb: Verb, version: CniVersion): void {
  if (compareVersions(version, VERB_SINCE[verb]) < 0) {
    throw new CniError(
      ErrorCode.IncompatibleVersion,
      `${verb} is not defined in CNI spec ${version}`,
      `${verb} needs cniVersion ${VERB_SINCE[verb]} or later`,
    );
  }
}

/**
 * Picks the version to speak: `cniVersion` if given, else the highest of a conflist's
 * `cniVersions` that we support.
 */
export function negotiateVersion(cniVersion: unknown, cniVersions: unknown): CniVersion {
  if (cniVersion === undefined && Array.isArray(cniVersions)) {
    const ours = cniVersions.filter(isSupportedVersion).sort(compareVersions);
    const best = ours[ours.length - 1];
    if (best) return best;
    throw incompatible(JSON.stringify(cniVersions));
  }
  if (cniVersion === undefined || cniVersion === null || cniVersion === "") {
    throw new CniError(ErrorCode.InvalidNetworkConfig, "cniVersion is missing from the network configuration");
  }
  if (typeof cniVersion !== "string") {
    throw new CniError(ErrorCode.InvalidNetworkConfig, `cniVersion must be a string such as "1.0.0"`);
  }
  if (!isSupportedVersion(cniVersion)) throw incompatible(cniVersion);
  return cniVersion;
}

function incompatible(requested: string): CniError {
  return new CniError(
    ErrorCode.IncompatibleVersion,
    "incompatible CNI versions",
    `config is ${requested}, plugin supports ${SUPPORTED_VERSIONS.join(", ")}`,
  );
}

export function versionInfo(requested: string | undefined) {
  return {
    cniVersion: isSupportedVersion(requested) ? requested : LATEST_VERSION,
    supportedVersions: [...SUPPORTED_VERSIONS],
  };
}
