/**
 * `netkit-cni agent` from the executable. The agent (src/agent) is a bundle of its own
 * inside it, evaluated here and only here: it carries the Kubernetes API client and the
 * metrics library, megabytes that would otherwise be loaded at every plugin verb's start.
 * It gets a `require` for built-in modules only, which is all a bundle needs.
 */
import { readAgentBundle } from "../sys/embedded-assets";

type RunAgent = (argv: string[]) => Promise<number>;

export async function runEmbeddedAgent(argv: string[]): Promise<number> {
  // Required here: no verb needs node:module.
  const nodeModule: typeof import("node:module") = require("node:module");
  const builtinRequire = nodeModule.createRequire(process.execPath);
  const agentRequire = (id: string): unknown => {
    if (id.startsWith("bun:") || nodeModule.isBuiltin(id)) return builtinRequire(id);
    throw Object.assign(new Error(`Cannot find module '${id}' (the agent's bundle carries its modules)`), {
      code: "MODULE_NOT_FOUND",
    });
  };
  const mod: { exports: { runAgent?: RunAgent } } = { exports: {} };
  const evaluate = new Function("module", "exports", "require", "__filename", "__dirname", readAgentBundle());
  evaluate(mod, mod.exports, agentRequire, process.execPath, "/");
  if (typeof mod.exports.runAgent !== "function") throw new Error("the agent's bundle exports no runAgent");
  return mod.exports.runAgent(argv);
}
