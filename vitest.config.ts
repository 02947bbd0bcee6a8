import { defineConfig } from "vitest/config";
// Per-test and per-hook timeouts, three times the host's in the guests (loading the node's
// programs in UML took 37 s once against a 30 s ceiling).
import { ceiling, inGuest } from "./test/support/ceiling";

// The forks pool: ffi-rs crashes the process when a worker thread that loaded it exits,
// and setns() must run on a process's main thread. Projects run in groupOrder: pure
// unit tests first, then the eBPF programs, then the executable in real namespaces.
export default defineConfig({
  // In the UML guests the repository is the host's folder, shared by guests that run side
  // by side (make test-vm-lanes): vitest's results cache goes to the guest's own /tmp.
  cacheDir: inGuest ? "/tmp/vite-cache" : undefined,
  test: {
    pool: "forks",
    // The failures again after the summary, where a log read from its tail shows them;
    // and, for the guests' time-outs, which files are running (test/support/progress.ts).
    reporters: ["default", "./test/support/failure-digest.ts", "./test/support/progress.ts"],
    projects: [
      {
        // Pure code, but the property tests run thousands of cases: the timeout guards
        // against a hang, not speed (the bench times things), so a loaded machine's
        // slowness cannot fail them.
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          pool: "forks",
          testTimeout: ceiling(30_000),
          sequence: { groupOrder: 0 },
        },
      },
      {
        // netkit-cni agent: the stand-in API server and the agent's loops, in namespaces of
        // their own (root), after the unit tests.
        test: {
          name: "agent",
          include: ["test/agent/**/*.test.ts"],
          pool: "forks",
          testTimeout: ceiling(60_000),
          hookTimeout: ceiling(60_000),
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
      {
        test: {
          name: "bpf",
          include: ["test/bpf/**/*.test.ts"],
          pool: "forks",
          testTimeout: ceiling(30_000),
          // Each file compiles the objects in beforeAll: in the single-CPU guest, with
          // other files compiling beside it, that took over vitest's default 10 s.
          hookTimeout: ceiling(60_000),
          sequence: { groupOrder: 2 },
        },
      },
      {
        test: {
          name: "integration",
          include: ["test/integration/**/*.test.ts"],
          pool: "forks",
          testTimeout: ceiling(60_000),
          hookTimeout: ceiling(60_000),
          // Tests build real namespaces and devices; two at a time is what 2 cores sustain,
          // one in the single-CPU netkit VM.
          maxWorkers: inGuest ? 1 : 2,
          sequence: { groupOrder: 3 },
        },
      },
      {
        // Only inside the netkit VM (make test-vm): these need a kernel with netkit.
        test: {
          name: "netkit",
          include: ["test/netkit/**/*.test.ts"],
          pool: "forks",
          testTimeout: ceiling(120_000),
          hookTimeout: ceiling(60_000),
          maxWorkers: 1,
          sequence: { groupOrder: 4 },
        },
      },
      {
        // Only inside the qemu guest on Debian's packaged 6.12 kernel (make test-vm-distro,
        // test/qemu): what that kernel decides, with netkit pods and the conntrack NAT check.
        // Its own files, plus the shared files whose outcome depends on the kernel, the
        // frame corpus among them (test/integration/frames.test.ts; further corpus files for
        // these pods can go in test/distro/frames/).
        test: {
          name: "distro",
          include: [
            "test/distro/**/*.test.ts",
            "test/integration/nat-safety.test.ts",
            "test/integration/bandwidth.test.ts",
            "test/integration/sock-bypass.test.ts",
            "test/integration/frames.test.ts",
            "test/netkit/netkit.test.ts",
            // Service translation where the socket iterators that close a withdrawn
            // backend's sockets can run (a JIT, BTF): the UML guest has neither.
            "test/integration/service-translation.test.ts",
            "test/integration/service-churn.test.ts",
            "test/bpf/svc-destroy.test.ts",
            // Flow records with netkit pods (the host's agent phase has them with veth).
            "test/agent/flows.test.ts",
          ],
          globalSetup: ["test/distro/node-setup.ts"],
          pool: "forks",
          // Everything is emulated: user space runs ~25 times slower than on the host.
          testTimeout: 600_000,
          hookTimeout: 120_000,
          maxWorkers: 1,
          sequence: { groupOrder: 6 },
        },
      },
      {
        // Real runtimes (cnitool, podman, containerd) driving the plugin: make test-e2e.
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          pool: "forks",
          testTimeout: 120_000,
          hookTimeout: 60_000,
          maxWorkers: 2,
          sequence: { groupOrder: 5 },
        },
      },
    ],
  },
});
