/**
 * The start-up section of bench/README.md (bench/lib/startup.ts's breakdown): where one
 * invocation's time goes, phase by phase, its system calls beside ptp's, its CPU profiles,
 * and an ADD part by part; and the chart.
 */
import { type Img, ms, x2 } from "./format";
import type { BenchResult } from "./result";
import type { PhaseReport, ProfileReport, StartupReport, SyscallReport } from "./startup";
import { PALETTE, stackedChart } from "./svg";

/** A profile's ten largest entries of at least 0.3 ms, as "name 1.2 ms, ...". */
const topList = (xs: { name: string; ms: number }[]) =>
  xs
    .filter((x) => x.ms >= 0.3)
    .slice(0, 10)
    .map((x) => `${x.name} ${ms(x.ms)}`)
    .join(", ");

/** Time inside the wrapped built-ins whose names start with `prefix`. */
const span = (p: PhaseReport, prefix: string) =>
  Object.entries(p.spans)
    .filter(([k]) => k.startsWith(prefix))
    .reduce((a, [, v]) => a + v.ms, 0);

/** ms per run of the profile's entries named `name` (a step, or a function of src/). */
const profiled = (xs: { name: string; ms: number }[] | undefined, name: string) =>
  xs?.filter((x) => x.name.startsWith(`${name} `)).reduce((a, x) => a + x.ms, 0) ?? 0;

function phasesTable(s: StartupReport): string {
  const row = (label: string, f: (p: PhaseReport) => string) =>
    `| ${label} | ${f(s.add)} | ${f(s.addHostLocal)} | ${f(s.del)} |`;
  const rows = [
    `| phase (median of ${s.add.runs} runs) | ADD, embedded IPAM | ADD, host-local | DEL |`,
    "|---|---:|---:|---:|",
    row("wall time seen by the runtime (incl. nsenter)", (p) => `**${ms(p.wall.median)}**`),
    row("process start → Node bootstrapped (V8, OpenSSL, built-ins)", (p) => ms(p.bootstrap.median)),
    row("→ main(): SEA bundle compiled + evaluated, addons loaded", (p) => ms(p.moduleLoad.median)),
    row("→ exit: the verb (netlink, bpf, IPAM, result)", (p) => ms(p.verb.median)),
    row("outside the process's clock (fork/exec, nsenter, teardown)", (p) => ms(p.outside.median)),
  ];
  const spanNames = [
    ...new Set([...Object.keys(s.add.spans), ...Object.keys(s.addHostLocal.spans), ...Object.keys(s.del.spans)]),
  ].sort();
  for (const n of spanNames) {
    rows.push(
      row(`of which inside \`${n}\``, (p) => (p.spans[n] ? `${ms(p.spans[n].ms)} (${p.spans[n].calls}×)` : "–")),
    );
  }
  return rows.join("\n");
}

function syscallLines(st: NonNullable<StartupReport["strace"]>): string[] {
  const cols = [st.add, st.addHostLocal, st.del, st.ptpAdd, st.ptpDel];
  const bpf = (x: SyscallReport) =>
    Object.entries(x.bpf)
      .sort((a, b) => b[1].calls - a[1].calls)
      .map(([k, v]) => `${k.replace("BPF_", "")} ${v.calls}`)
      .join(", ") || "–";
  const c = (x: SyscallReport, k: string) => x.counts[k] ?? 0;
  const row = (label: string, f: (x: SyscallReport) => string) => `| ${label} | ${cols.map(f).join(" | ")} |`;
  return [
    "",
    "System calls (strace of 3 ADD+DEL pairs each: counts from one, kernel times as medians; strace slows user space, not the kernel's own waits):",
    "",
    "| | ours ADD, embedded IPAM | ours ADD, host-local | ours DEL | ptp ADD | ptp DEL |",
    "|---|---:|---:|---:|---:|---:|",
    row("rtnetlink sockets / requests", (x) => `${x.netlinkSockets} / ${x.netlinkRequests}`),
    row("kernel time in rtnetlink send/recv", (x) => ms(x.netlinkKernelMs)),
    row("interface dumps by getifaddrs (process.report)", (x) => String(x.getifaddrsDumps)),
    row("bpf(2) calls", bpf),
    row("kernel time in BPF_LINK_CREATE", (x) => ms(x.bpf.BPF_LINK_CREATE?.ms ?? 0)),
    row("mkdir / openat / readlink", (x) => `${c(x, "mkdir")} / ${c(x, "openat")} / ${c(x, "readlink")}`),
    row("setns / threads started (clone, clone3)", (x) => `${c(x, "setns")} / ${c(x, "clone") + c(x, "clone3")}`),
    row("IPAM plugin exec (under strace)", (x) => (x.ipamExecMs === undefined ? "–" : ms(x.ipamExecMs))),
  ];
}

function profileLines(p: ProfileReport): string[] {
  const groups = [...new Set([...Object.keys(p.load), ...Object.keys(p.verb)])].sort(
    (a, b) => (p.load[b] ?? 0) + (p.verb[b] ?? 0) - (p.load[a] ?? 0) - (p.verb[a] ?? 0),
  );
  return [
    "",
    `CPU profile of ADD (embedded IPAM; ${p.runs} runs, 100 µs sampling, ${ms(p.sampledMs)} sampled per run from the probe's start; a blocking system call counts as time of the JS frame that made it; each sample charged to the innermost bundle frame):`,
    "",
    "| charged to | module loading | verb |",
    "|---|---:|---:|",
    ...groups
      .filter((g) => (p.load[g] ?? 0) + (p.verb[g] ?? 0) >= 0.3)
      .map((g) => `| ${g} | ${ms(p.load[g] ?? 0)} | ${ms(p.verb[g] ?? 0)} |`),
    "",
    `The verb by step (what \`cmdAdd\` was calling; ms per run): ${topList(p.steps)}.`,
    "",
    `By innermost function of src/ (callees included): ${topList(p.srcFunctions)}.`,
  ];
}

function profileDelLines(pd: ProfileReport): string[] {
  return [
    "",
    `CPU profile of DEL (the same ${pd.runs} pods, ${ms(pd.sampledMs)} sampled per run). By step (what \`cmdDel\` was calling; ms per run): ${topList(pd.steps)}.`,
    "",
    `By innermost function of src/: ${topList(pd.srcFunctions)}.`,
  ];
}

/**
 * Where an ADD's time goes, part by part. What was done about each part, tried and left
 * is told in bench/README.md, outside the generated section: it changes with the code,
 * not with a run.
 */
function addParts(r: BenchResult, s: StartupReport): [string, string][] {
  const st = s.strace;
  const p = s.profile;
  const step = (name: string) => profiled(p?.steps, name);
  // The fast path's part of ADD; results from before it was split name it attachEndpoint.
  const fastPathStep = step("withNodeLock") + step("attachEndpoint");
  const ptpAdd = r.controlPlane?.cycles.ptp?.add.median;
  const noProg = r.controlPlane?.cycles["ours-no-programs"];
  const withProg = r.controlPlane?.cycles["ours-embedded"];
  const programsCost =
    noProg && withProg
      ? `; the same pods with only the source check (\`fastPath: false\`, same run): ADD+DEL ${ms(noProg.cycle.median)} vs ${ms(withProg.cycle.median)} with the fast path`
      : "";
  return [
    [
      "Node start-up (process start → bootstrapped)",
      `${ms(s.add.bootstrap.median)}; a bare \`node -e 0\` process: ${ms(s.nodeBare.median)}${ptpAdd ? `, ${x2(s.nodeBare.median / ptpAdd)} ptp's whole ADD (${ms(ptpAdd)})` : ""}`,
    ],
    [
      "Bundle evaluation and native addons (→ main())",
      `${ms(s.add.moduleLoad.median)}; addon dlopen ${ms(span(s.add, "dlopen"))}, SEA assets ${ms(span(s.add, "sea.getAsset"))}${s.add.spans["process.report.getReport (ffi-rs libc check)"] ? `, process.report ${ms(span(s.add, "process.report"))}` : ""}`,
    ],
    [
      "The pod's tcx link (BPF_LINK_CREATE)",
      `${ms(st?.add.bpf.BPF_LINK_CREATE?.ms ?? Number.NaN)} kernel time; \`withNodeLock\` step (ensureNodeDatapath, attachPod) ${ms(fastPathStep)}${programsCost}`,
    ],
    [
      "Node fast-path state opened on every ADD",
      `\`open\` step ${ms(step("open"))} (node lock, ${st?.add.bpf.BPF_OBJ_GET?.calls ?? "?"} BPF_OBJ_GET)`,
    ],
    [
      "IPAM",
      `embedded: \`add\` step ${ms(step("add"))}, of which \`writeTemp\` ${ms(profiled(p?.srcFunctions, "writeTemp"))}; host-local instead: exec ${ms(span(s.addHostLocal, "exec"))} (ADD wall ${ms(s.addHostLocal.wall.median)} vs ${ms(s.add.wall.median)})`,
    ],
    [
      "rtnetlink",
      `${st?.add.netlinkRequests ?? "?"} requests on ${st?.add.netlinkSockets ?? "?"} sockets, ${ms(st?.add.netlinkKernelMs ?? Number.NaN)} in the kernel; JS ${ms((p?.verb["src/netlink"] ?? 0) + (p?.verb["netlink package (JS)"] ?? 0))}`,
    ],
    [
      "Namespaces and sockets",
      `\`openNamespaces\` step ${ms(step("openNamespaces"))}; ${st?.add.counts.readlink ?? "?"} readlink calls`,
    ],
    ["Outside the process (fork/exec, nsenter, exit)", ms(s.add.outside.median)],
    [
      "DEL: deleting the host device",
      st
        ? `${ms(st.del.netlinkKernelMs)} kernel time in rtnetlink vs ${ms(st.ptpDel.netlinkKernelMs)} for ptp's veth`
        : "n/a",
    ],
  ];
}

function startupBody(r: BenchResult): string {
  const s = r.startup;
  if (!s) return "_start-up breakdown skipped in this run._";
  const out = [
    `Bare Node process (\`node -e 0\`, wall): **${ms(s.nodeBare.median)}**; the executable answering VERSION (start, bundle, no work): **${ms(s.seaVersion.median)}**.`,
    "",
    phasesTable(s),
  ];
  if (s.strace) out.push(...syscallLines(s.strace));
  if (s.profile) out.push(...profileLines(s.profile));
  if (s.profileDel) out.push(...profileDelLines(s.profileDel));
  out.push(
    "",
    `**Where an ADD's ${ms(s.add.wall.median)} go, part by part** (medians; the parts overlap slightly: profile steps include their system calls; what was done about each part: this README's section _Where an ADD's time goes: done, tried, left_):`,
    "",
    "| part | measured |",
    "|---|---|",
    ...addParts(r, s).map(([part, measured]) => `| ${part} | ${measured} |`),
  );
  return out.join("\n");
}

export function startupSection(host: BenchResult | undefined, img: Img): string[] {
  return [
    "### Start-up: where one invocation's time goes",
    "",
    host ? startupBody(host) : "_no run on this kernel yet._",
    img("startup.svg", "start-up phases"),
  ];
}

export function startupChart(r: BenchResult): string | undefined {
  const s = r.startup;
  if (!s) return undefined;
  const names = [
    "start → Node bootstrapped",
    "→ main(): bundle, addons",
    "→ exit: the verb",
    "fork/exec, nsenter, teardown",
  ];
  const row = (label: string, p: PhaseReport) => ({
    label,
    segments: [p.bootstrap.median, p.moduleLoad.median, p.verb.median, p.outside.median].map((value, i) => ({
      series: names[i] as string,
      value,
    })),
  });
  const ptp = r.controlPlane?.cycles.ptp;
  const refLines = [
    { value: s.nodeBare.median, label: `bare Node process (node -e 0): ${ms(s.nodeBare.median)}`, color: "#555" },
  ];
  if (ptp)
    refLines.push({
      value: ptp.add.median,
      label: `ptp + host-local ADD p50: ${ms(ptp.add.median)}`,
      color: "#b5484b",
    });
  return stackedChart({
    title: "Where one invocation's time goes (medians)",
    subtitle: `this plugin, veth datapath with fast path; the executable answering VERSION: ${ms(s.seaVersion.median)}`,
    series: names.map((name, i) => ({ name, color: PALETTE[i] as string })),
    rows: [row("ADD, embedded IPAM", s.add), row("ADD, host-local", s.addHostLocal), row("DEL", s.del)],
    axisLabel: "milliseconds (caller's wall time)",
    refLines,
    unit: "ms",
  });
}
