/** How the report writes figures in its tables: the one format for every section. */
import type { Summary } from "./stats";

/** A number with thousands separators, "n/a" when there is none. */
export const num = (v: number, digits = 0) =>
  Number.isFinite(v)
    ? v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })
    : "n/a";

export const x2 = (v: number) => (Number.isFinite(v) ? `${v.toFixed(2)}×` : "n/a");

/** A paired ratio: its median in bold, the per-round min–max beside it. */
export const ratioCell = (s: Summary) =>
  s.n ? `**${x2(s.median)}** (${s.min.toFixed(2)}–${s.max.toFixed(2)})` : "n/a";

/** Two decimals (crossings per packet). */
export const pp = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? "n/a" : v.toFixed(2));

/** Milliseconds: one decimal below 10. */
export const ms = (v: number) => (Number.isFinite(v) ? `${v.toFixed(v < 10 ? 1 : 0)} ms` : "n/a");

/** KiB as MiB, one decimal. */
export const mb = (kb: number) => (Number.isFinite(kb) ? `${(kb / 1024).toFixed(1)} MiB` : "n/a");

/** "2026-12-03 06:43": a run's start, to the minute. */
export const minute = (iso: string) => iso.slice(0, 16).replace("T", " ");

/** A chart's Markdown image, or nothing when the chart was not drawn. */
export type Img = (file: string, alt: string) => string;
