/**
 * CNI errors: every failure the plugin reports carries one of the spec's codes from the
 * place it arises; the top level only renders it as `{cniVersion, code, msg, details}`.
 */

/** Error codes from the CNI spec (SPEC.md, "Error" section) and ours (100+). */
export const ErrorCode = {
  IncompatibleVersion: 1,
  UnsupportedField: 2,
  ContainerUnknown: 3,
  InvalidEnvironment: 4,
  IoFailure: 5,
  DecodeFailure: 6,
  InvalidNetworkConfig: 7,
  TryAgainLater: 11,
  PluginNotAvailable: 50,
  LimitedConnectivity: 51,
  /** The kernel refused a step of building the datapath; msg carries its extended ack. */
  DatapathFailure: 100,
  /** CHECK found the container's networking differs from what ADD made. */
  CheckMismatch: 101,
  /** A delegated IPAM plugin failed in a way it did not describe with a code. */
  IpamFailure: 102,
  Internal: 999,
} as const;

export class CniError extends Error {
  constructor(
    readonly code: number,
    msg: string,
    readonly details?: string,
  ) {
    super(msg);
    this.name = "CniError";
  }
}

export const invalidConfig = (msg: string, details?: string) =>
  new CniError(ErrorCode.InvalidNetworkConfig, msg, details);

export const invalidEnv = (msg: string, details?: string) => new CniError(ErrorCode.InvalidEnvironment, msg, details);

/** Wraps anything thrown below the protocol layer into a CniError, keeping its text. */
export function asCniError(e: unknown, fallbackCode: number = ErrorCode.Internal): CniError {
  if (e instanceof CniError) return e;
  if (e instanceof Error) return new CniError(fallbackCode, e.message);
  return new CniError(fallbackCode, String(e));
}

export interface ErrorJson {
  cniVersion: string;
  code: number;
  msg: string;
  details?: string;
}

export function renderError(err: CniError, cniVersion: string): ErrorJson {
  const out: ErrorJson = { cniVersion, code: err.code, msg: err.message };
  if (err.details) out.details = err.details;
  return out;
}
