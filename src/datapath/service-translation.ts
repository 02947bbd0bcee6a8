/**
 * Service translation as the verbs use it ("serviceTranslation": true): bpf_svc.c's eight
 * programs attached to a cgroup v2 (the node's root unless configured) as links pinned
 * under `<bpffsRoot>/svc/`, switched in place when a newer build loads, never detached by
 * an ADD. Each pod's record, which is what makes the programs act for its sockets, is
 * part of its state (bpf/pod-state.ts), made and forgotten with the rest. The Service
 * tables have one writer of their own (bpf/svc-table.ts); while they hold no Service, a
 * recorded pod's sockets are simply not translated.
 *
 * Not optional once asked: a network that asks for translation and lands on a kernel
 * that cannot run it fails its ADD (code 50) with the kernel's reason, because its pods
 * would otherwise depend, unknown to the admin, on whatever else handles Services.
 * Runs under the node lock (node-datapath.ts calls it there).
 */
import {
  attachCgroup,
  loadSvcPrograms,
  SVC_PROGRAM_NAMES,
  type SvcHook,
  sectionAttachType,
  svcLinkPin,
} from "../bpf/index";
import { CniError, ErrorCode } from "../cni/errors";
import { log } from "../log";
import { ensurePinnedLink, onCgroup } from "./pinned-link";
import { cgroup2Root, isCgroup2 } from "./sockbypass";

const LABEL = "service translation";
const HOOKS = Object.keys(SVC_PROGRAM_NAMES) as SvcHook[];

export interface ServiceTranslationObjects {
  object: Buffer;
  epoch: number;
}

/** The hook's attach type: its program's ELF section is "cgroup/<hook>". */
const attachTypeOf = (hook: SvcHook): number => {
  const type = sectionAttachType(`cgroup/${hook}`);
  if (type === undefined) throw new Error(`no attach type for ${hook}`);
  return type;
};

/**
 * Makes sure the programs run on `cgroup` (undefined: the node's cgroup v2 root): loads or
 * opens them, then each hook's link, created and pinned or switched to these programs.
 * Throws a CniError (code 50) naming what the kernel or the node lacks.
 */
export function ensureServiceTranslation(
  root: string,
  objects: ServiceTranslationObjects,
  cgroup: string | undefined,
): void {
  const dir = cgroup ?? cgroup2Root();
  if (!dir) throw unavailable("no cgroup v2 hierarchy is mounted");
  if (!isCgroup2(dir)) throw unavailable(`${dir} is not a cgroup v2 directory`);
  let svc: ReturnType<typeof loadSvcPrograms>;
  try {
    svc = loadSvcPrograms(root, objects.object, objects.epoch);
  } catch (e) {
    throw unavailable(`the kernel refused its programs: ${(e as Error).message.split("\n")[0]}`);
  }
  try {
    if (svc.loaded) log.info(`${LABEL}: loaded programs of build ${svc.build}`);
    for (const hook of HOOKS) {
      const program = svc.programs[hook];
      ensurePinnedLink(
        LABEL,
        svcLinkPin(root, hook, dir),
        program,
        !svc.superseded,
        onCgroup(dir, (fd) => attachCgroup(program, fd, attachTypeOf(hook))),
      );
    }
  } finally {
    svc.close();
  }
}

function unavailable(reason: string): CniError {
  return new CniError(
    ErrorCode.PluginNotAvailable,
    `"serviceTranslation" cannot run on this node: ${reason}`,
    'set "serviceTranslation": false to leave Services to kube-proxy',
  );
}
