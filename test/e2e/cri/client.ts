/**
 * A CRI client speaking to a runtime's socket the way kubelet does: gRPC over a unix
 * socket, runtime.v1, only the sandbox calls (runtime.proto beside this file). Every call
 * has a deadline; a rejected call carries the runtime's message (kubelet logs the same).
 */
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { ceiling } from "../../support/ceiling";

interface PortMapping {
  protocol?: "TCP" | "UDP" | "SCTP";
  containerPort: number;
  hostPort: number;
  hostIp?: string;
}

export interface SandboxConfig {
  metadata: { name: string; uid: string; namespace: string; attempt?: number };
  hostname?: string;
  portMappings?: PortMapping[];
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  linux?: { cgroupParent?: string };
}

export interface SandboxStatus {
  status: {
    id: string;
    state: "SANDBOX_READY" | "SANDBOX_NOTREADY";
    network: { ip: string; additionalIps: { ip: string }[] } | null;
    annotations: Record<string, string>;
  };
  info: Record<string, string>;
}

interface RuntimeCondition {
  type: string;
  status: boolean;
  reason: string;
  message: string;
}

type Unary = (req: unknown, meta: grpc.Metadata, opts: grpc.CallOptions, cb: grpc.requestCallback<unknown>) => void;

const PROTO = path.join(__dirname, "runtime.proto");

export class CriClient {
  private readonly runtime: grpc.Client & Record<string, Unary>;
  private readonly images: grpc.Client & Record<string, Unary>;

  constructor(
    socket: string,
    /** Per-call deadline: generous, the machine may be busy and ADDs queue on the node lock
     * (in the UML guest, 30 sandboxes at once put one RunPodSandbox past 180 s). */
    private readonly deadlineMs = ceiling(180_000),
  ) {
    const def = protoLoader.loadSync(PROTO, { keepCase: false, longs: String, enums: String, defaults: true });
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      runtime: { v1: Record<string, grpc.ServiceClientConstructor> };
    };
    const creds = grpc.credentials.createInsecure();
    const { RuntimeService, ImageService } = pkg.runtime.v1 as {
      RuntimeService: grpc.ServiceClientConstructor;
      ImageService: grpc.ServiceClientConstructor;
    };
    this.runtime = new RuntimeService(`unix://${socket}`, creds) as grpc.Client & Record<string, Unary>;
    this.images = new ImageService(`unix://${socket}`, creds) as grpc.Client & Record<string, Unary>;
  }

  private call<T>(
    client: Record<string, Unary>,
    method: string,
    req: unknown,
    deadlineMs = this.deadlineMs,
  ): Promise<T> {
    return new Promise((resolve, reject) => {
      const fn = client[method] as Unary;
      fn.call(client, req, new grpc.Metadata(), { deadline: Date.now() + deadlineMs }, (err, res) => {
        if (err) reject(Object.assign(new Error(`${method}: ${err.details || err.message}`), { code: err.code }));
        else resolve(res as T);
      });
    });
  }

  version(deadlineMs?: number): Promise<{ runtimeName: string; runtimeVersion: string; runtimeApiVersion: string }> {
    return this.call(this.runtime, "Version", { version: "v1" }, deadlineMs);
  }

  async conditions(): Promise<RuntimeCondition[]> {
    const r = await this.call<{ status: { conditions: RuntimeCondition[] } }>(this.runtime, "Status", {}, 10_000);
    return r.status.conditions;
  }

  async runPodSandbox(config: SandboxConfig): Promise<string> {
    const r = await this.call<{ podSandboxId: string }>(this.runtime, "RunPodSandbox", { config });
    return r.podSandboxId;
  }

  async stopPodSandbox(id: string): Promise<void> {
    await this.call(this.runtime, "StopPodSandbox", { podSandboxId: id });
  }

  async removePodSandbox(id: string): Promise<void> {
    await this.call(this.runtime, "RemovePodSandbox", { podSandboxId: id });
  }

  podSandboxStatus(id: string): Promise<SandboxStatus> {
    return this.call(this.runtime, "PodSandboxStatus", { podSandboxId: id, verbose: true });
  }

  async listPodSandbox(): Promise<{ id: string; state: string; metadata: { name: string } }[]> {
    const r = await this.call<{ items: { id: string; state: string; metadata: { name: string } }[] }>(
      this.runtime,
      "ListPodSandbox",
      {},
    );
    return r.items;
  }

  /** The image's id, or undefined while the runtime does not know it. */
  async imageId(image: string): Promise<string | undefined> {
    const r = await this.call<{ image: { id: string } | null }>(
      this.images,
      "ImageStatus",
      { image: { image } },
      10_000,
    );
    return r.image?.id || undefined;
  }

  close(): void {
    this.runtime.close();
    this.images.close();
  }
}
