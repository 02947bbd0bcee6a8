/**
 * The control plane's agent: `netkit-cni agent --serve-verbs` in a configuration's node
 * namespace, against a stand-in API naming that node, for the "ours-agent" row (the plugin
 * hands its verbs to it). Its own memory is read after its first sync and after the cycles,
 * storms and single runs it served.
 */
import * as path from "node:path";
import { StandInApiServer } from "../../test/support/kube-apiserver";
import { Agent, mb, SELF, SELF_PODS, vm } from "./agent-scale";
import type { BenchFixture } from "./cleanup";

export interface VerbAgentMemory {
  /** VmRSS once synced, before any verb, MB. */
  syncedMb: number;
  /** VmRSS after every verb of the section, MB. */
  afterMb: number;
  /** VmHWM then: the most it held at once, MB. */
  peakMb: number;
}

export class VerbAgent {
  private constructor(
    private readonly agent: Agent,
    private readonly api: StandInApiServer,
    readonly stateDir: string,
    private readonly syncedMb: number,
  ) {}

  static async start(fx: BenchFixture, netns: string, hostInterface: string): Promise<VerbAgent> {
    const dir = fx.tempDir("nkb-verb-agent-");
    const api = new StandInApiServer(dir, "bench-token", 60_000);
    await api.start();
    api.addNode({ name: SELF, podCIDRs: [SELF_PODS], internalIPs: ["10.30.0.1"] });
    const agent = new Agent(fx, netns, dir, api, ["--serve-verbs", "--host-interface", hostInterface]);
    await agent.lineAt(/synced: conflist written/, 60_000);
    return new VerbAgent(agent, api, path.join(dir, "state"), mb(vm(agent.proc.pid as number, "VmRSS")));
  }

  async stop(): Promise<VerbAgentMemory> {
    const pid = this.agent.proc.pid as number;
    const memory = { syncedMb: this.syncedMb, afterMb: mb(vm(pid, "VmRSS")), peakMb: mb(vm(pid, "VmHWM")) };
    await this.agent.stop();
    await this.api.stop();
    return memory;
  }
}
