/**
 * BPF links to network devices: tcx ingress/egress (veth host side, uplink NIC) and the
 * netkit primary/peer hooks; and the socket bypass's three: sock_ops and sock_release on
 * a cgroup v2, the sk_msg verdict on a sockhash. A link holds its program attached for as long as the link
 * fd is open or the link is pinned; closing the last reference detaches it. Never pins
 * (pins.ts) and never loads programs.
 */
import { closeFd, linkCreate, linkDetach, linkUpdate, objGetInfo } from "../../sys/bpf-syscall";
import { BPF_ATTACH_TYPE } from "../../sys/bpf-uapi";
import { openPin, pinObject } from "./pins";
import type { BpfProgram } from "./programs";

export type TcxDirection = "ingress" | "egress";
export type NetkitHook = "primary" | "peer";

export class BpfLink {
  private open = true;

  constructor(readonly fd: number) {}

  static openPinned(pinPath: string): BpfLink {
    return new BpfLink(openPin(pinPath));
  }

  pin(pinPath: string): void {
    pinObject(this.fd, pinPath);
  }

  /** Replaces the program atomically (no window without one). With `expected`, fails
   * (EPERM) unless that program is the one attached now. */
  update(program: BpfProgram, expected?: BpfProgram): void {
    linkUpdate(this.fd, program.fd, expected?.fd);
  }

  /** The link's own kernel id (struct bpf_link_info.id). */
  id(): number {
    return objGetInfo(this.fd, 16).readUInt32LE(4);
  }

  /** The kernel id of the program attached now (struct bpf_link_info.prog_id). */
  programId(): number {
    return objGetInfo(this.fd, 16).readUInt32LE(8);
  }

  /** Detaches now, even while pinned; the link object lingers, defunct, until released. */
  detach(): void {
    linkDetach(this.fd);
  }

  close(): void {
    if (!this.open) return;
    this.open = false;
    closeFd(this.fd);
  }
}

/** Appends `program` to the device's tcx chain (after programs already there). */
export function attachTcx(program: BpfProgram, ifindex: number, direction: TcxDirection): BpfLink {
  const attachType = direction === "ingress" ? BPF_ATTACH_TYPE.TCX_INGRESS : BPF_ATTACH_TYPE.TCX_EGRESS;
  return new BpfLink(linkCreate({ progFd: program.fd, targetIfindex: ifindex, attachType }));
}

/** Attaches to a netkit device's hook; `ifindex` is the primary's (both hooks are
 * addressed through the primary, which lives in the host namespace). */
export function attachNetkit(program: BpfProgram, primaryIfindex: number, hook: NetkitHook): BpfLink {
  const attachType = hook === "primary" ? BPF_ATTACH_TYPE.NETKIT_PRIMARY : BPF_ATTACH_TYPE.NETKIT_PEER;
  return new BpfLink(linkCreate({ progFd: program.fd, targetIfindex: primaryIfindex, attachType }));
}

/** Attaches a sock_ops program to the cgroup v2 directory open as `cgroupFd` (and so to
 * every cgroup below it). Other programs already attached there keep running. */
export function attachCgroupSockOps(program: BpfProgram, cgroupFd: number): BpfLink {
  return new BpfLink(
    linkCreate({ progFd: program.fd, targetFd: cgroupFd, attachType: BPF_ATTACH_TYPE.CGROUP_SOCK_OPS }),
  );
}

/** Attaches a cgroup sock program to the release hook (close()) of every socket of the
 * cgroup v2 directory open as `cgroupFd` and those below it. */
export function attachCgroupSockRelease(program: BpfProgram, cgroupFd: number): BpfLink {
  return new BpfLink(
    linkCreate({ progFd: program.fd, targetFd: cgroupFd, attachType: BPF_ATTACH_TYPE.CGROUP_INET_SOCK_RELEASE }),
  );
}

/** Attaches an sk_msg program as the verdict of a sockhash or sockmap (Linux 6.10 and
 * later take this as a link; older kernels only through BPF_PROG_ATTACH, which we do not use). */
export function attachSkMsg(program: BpfProgram, sockMapFd: number): BpfLink {
  return new BpfLink(
    linkCreate({ progFd: program.fd, targetFd: sockMapFd, attachType: BPF_ATTACH_TYPE.SK_MSG_VERDICT }),
  );
}

/** Attaches a cgroup program to the hook it was loaded for (`attachType`, its expected
 * attach type) on the cgroup v2 directory open as `cgroupFd` and every cgroup below it.
 * Other programs on that hook keep running: a link attaches beside them. */
export function attachCgroup(program: BpfProgram, cgroupFd: number, attachType: number): BpfLink {
  return new BpfLink(linkCreate({ progFd: program.fd, targetFd: cgroupFd, attachType }));
}

/** An iterator link for a tracing program loaded as BPF_TRACE_ITER (iterCreate runs it). */
export function attachIterator(program: BpfProgram): BpfLink {
  return new BpfLink(linkCreate({ progFd: program.fd, targetFd: 0, attachType: BPF_ATTACH_TYPE.TRACE_ITER }));
}
