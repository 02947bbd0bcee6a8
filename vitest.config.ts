import { defineConfig } from "vitest/config";

// The forks pool: ffi-rs crashes the process when a worker thread that loaded it exits,
// and setns() must run on a process's main thread.
export default defineConfig({
  test: {
    pool: "forks",
    projects: [
      { test: { name: "unit", include: ["test/unit/**/*.test.ts"], pool: "forks" } },
      { test: { name: "bpf", include: ["test/bpf/**/*.test.ts"], pool: "forks", testTimeout: 30_000 } },
      {
        test: {
          name: "integration",
          include: ["test/integration/**/*.test.ts"],
          pool: "forks",
          testTimeout: 60_000,
          hookTimeout: 60_000,
          // Tests build real namespaces and devices; two at a time is what 2 cores sustain.
          maxWorkers: 2,
        },
      },
    ],
  },
});
