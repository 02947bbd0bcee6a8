/**
 * Horizontal grouped bar charts as plain SVG (no chart library): one block per group
 * (a path), one bar per series (a placement, a test), value printed at the bar's end,
 * optional whiskers (spread) and vertical reference lines (host's level, a target).
 */

export interface Bar {
  series: string;
  value: number;
  lo?: number;
  hi?: number;
  /** Printed after the bar; defaults to the formatted value. */
  label?: string;
}

export interface Group {
  label: string;
  sublabel?: string;
  bars: Bar[];
}

type RefLine = { value: number; label: string; color?: string };

export interface ChartSpec {
  title: string;
  subtitle?: string;
  series: { name: string; color: string }[];
  groups: Group[];
  axisLabel: string;
  refLines?: RefLine[];
  max?: number;
  format?: (v: number) => string;
}

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
const r1 = (v: number) => Math.round(v * 10) / 10;

function niceStep(max: number, ticks = 5): number {
  const raw = max / ticks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

export const PALETTE = ["#3b6ea8", "#e08a2c", "#5a9e4b", "#b5484b", "#7a5ea8", "#8c8c8c"];

const WIDTH = 860;
const BAR_H = 14;
const BAR_GAP = 3;
const GROUP_GAP = 14;

/** How one bar chart maps values to x and colours its series. */
interface BarLayout {
  left: number;
  x: (v: number) => number;
  fmt: (v: number) => string;
  colorOf: Map<string, string>;
}

export function barChart(spec: ChartSpec): string {
  const left = 270;
  const fmt = spec.format ?? ((v: number) => (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2)));
  const plotW = WIDTH - left - valueRoom(spec.groups, fmt);
  const { step, axisMax } = barAxis(spec);
  const x = (v: number) => left + (Math.max(0, Math.min(v, axisMax)) / axisMax) * plotW;
  const { legendY, top } = plotTop(spec);
  const layout: BarLayout = { left, x, fmt, colorOf: new Map(spec.series.map((s) => [s.name, s.color])) };
  const body: string[] = [];
  let y = top;
  for (const g of spec.groups) y = groupSvg(g, y, layout, body);
  const plotBottom = y;
  return [
    ...header(WIDTH, r1(plotBottom + 44), spec.title, spec.subtitle),
    ...legendSvg(spec.series, left, legendY),
    ...gridSvg(x, step, axisMax, top, plotBottom, fmt),
    ...body,
    ...refLinesSvg(spec.refLines, x, top, plotBottom),
    axisLabelSvg(left + plotW / 2, plotBottom, spec.axisLabel),
    "</svg>",
    "",
  ].join("\n");
}

/** Room on the right of the plot for the longest value label. */
function valueRoom(groups: Group[], fmt: (v: number) => string): number {
  const longest = Math.max(...groups.flatMap((g) => g.bars.map((b) => (b.label ?? fmt(b.value)).length)), 4);
  return Math.min(300, Math.max(70, Math.round(longest * 6.4) + 16));
}

/** The axis reaches past every bar, whisker and reference line, unless the spec fixes it. */
function barAxis(spec: ChartSpec): { step: number; axisMax: number } {
  const values = spec.groups.flatMap((g) => g.bars.flatMap((b) => [b.value, b.hi ?? b.value]));
  const refs = (spec.refLines ?? []).map((r) => r.value);
  const dataMax = Math.max(...values.filter(Number.isFinite), ...refs, 0) || 1;
  const step = niceStep(spec.max ?? dataMax * 1.05);
  return { step, axisMax: spec.max ?? Math.ceil((dataMax * 1.02) / step) * step };
}

/** The legend's row, and the plot's top below it and one label row per reference line. */
function plotTop(spec: { subtitle?: string; refLines?: RefLine[] }): { legendY: number; top: number } {
  const legendY = spec.subtitle ? 56 : 38;
  return { legendY, top: legendY + 30 + 13 * (spec.refLines?.length ?? 0) };
}

/** One group's label and bars, drawn from y0 down into out; returns the next group's y. */
function groupSvg(g: Group, y0: number, l: BarLayout, out: string[]): number {
  const blockH = g.bars.length * (BAR_H + BAR_GAP) - BAR_GAP;
  const mid = y0 + blockH / 2;
  out.push(
    `<text x="${l.left - 10}" y="${r1(mid + (g.sublabel ? -2 : 4))}" text-anchor="end" class="group">${esc(g.label)}</text>`,
  );
  if (g.sublabel)
    out.push(`<text x="${l.left - 10}" y="${r1(mid + 12)}" text-anchor="end" class="sub">${esc(g.sublabel)}</text>`);
  let y = y0;
  for (const b of g.bars) {
    out.push(...barSvg(g.label, b, y, l));
    y += BAR_H + BAR_GAP;
  }
  return y + (GROUP_GAP - BAR_GAP);
}

/** One bar at y: its rectangle, whiskers when it has a spread, and its value at the end. */
function barSvg(group: string, b: Bar, y: number, l: BarLayout): string[] {
  if (!Number.isFinite(b.value)) return [`<text x="${l.left + 4}" y="${r1(y + BAR_H - 3)}" class="val">n/a</text>`];
  const { x, left } = l;
  const color = l.colorOf.get(b.series) ?? "#888";
  const label = b.label ?? l.fmt(b.value);
  const w = Math.max(0.5, x(b.value) - left);
  const out = [
    `<rect x="${left}" y="${r1(y)}" width="${r1(w)}" height="${BAR_H}" fill="${color}"><title>${esc(`${group} — ${b.series}: ${label}`)}</title></rect>`,
  ];
  if (b.lo !== undefined && b.hi !== undefined && Number.isFinite(b.lo) && Number.isFinite(b.hi)) {
    const cy = r1(y + BAR_H / 2);
    out.push(
      `<path d="M${r1(x(b.lo))} ${cy}H${r1(x(b.hi))}M${r1(x(b.lo))} ${r1(y + 3)}V${r1(y + BAR_H - 3)}M${r1(x(b.hi))} ${r1(y + 3)}V${r1(y + BAR_H - 3)}" class="whisker"/>`,
    );
  }
  const tx = Math.max(x(b.value), b.hi !== undefined && Number.isFinite(b.hi) ? x(b.hi) : 0) + 5;
  out.push(`<text x="${r1(tx)}" y="${r1(y + BAR_H - 3)}" class="val">${esc(label)}</text>`);
  return out;
}

/** Vertical grid lines at each step of the axis, with their tick labels below the plot. */
function gridSvg(
  x: (v: number) => number,
  step: number,
  axisMax: number,
  top: number,
  plotBottom: number,
  tick: (v: number) => string,
): string[] {
  const out: string[] = [];
  for (let v = 0; v <= axisMax + step / 1000; v += step) {
    const xv = r1(x(v));
    out.push(`<line x1="${xv}" y1="${top - 6}" x2="${xv}" y2="${r1(plotBottom)}" class="grid"/>`);
    out.push(`<text x="${xv}" y="${r1(plotBottom + 16)}" text-anchor="middle" class="tick">${esc(tick(v))}</text>`);
  }
  return out;
}

/** Dashed reference lines across the plot, their labels stacked above it (the first highest). */
function refLinesSvg(refLines: RefLine[] | undefined, x: (v: number) => number, top: number, plotBottom: number) {
  const n = refLines?.length ?? 0;
  return (refLines ?? []).map((r, i) => {
    const xv = r1(x(r.value));
    const c = r.color ?? "#222";
    return (
      `<line x1="${xv}" y1="${top - 10}" x2="${xv}" y2="${r1(plotBottom)}" stroke="${c}" stroke-width="1.5" stroke-dasharray="5 3"/>` +
      refLabel(xv, top - 10 - (n - 1 - i) * 13, r.label, c, WIDTH)
    );
  });
}

const axisLabelSvg = (cx: number, plotBottom: number, label: string) =>
  `<text x="${cx}" y="${r1(plotBottom + 34)}" text-anchor="middle" class="axis">${esc(label)}</text>`;

const STYLE =
  "<style>.title{font-size:16px;font-weight:bold}.subtitle{font-size:12px;fill:#444}.group{font-size:12px}.sub{font-size:10px;fill:#666}.val{font-size:11px}.tick{font-size:10px;fill:#555}.grid{stroke:#e4e4e4}.legend{font-size:11px}.ref{font-size:10px}.axis{font-size:11px;fill:#333}.whisker{stroke:#222;stroke-width:1;fill:none}.seg{font-size:10px;fill:#fff}</style>";

/** A reference line's label: right of the line, or left of it when it would run off the chart. */
function refLabel(x: number, y: number, label: string, color: string, width: number): string {
  const fits = x + 4 + label.length * 5.8 < width - 4;
  const anchor = fits ? "" : ' text-anchor="end"';
  return `<text x="${r1(fits ? x + 4 : x - 4)}" y="${y}"${anchor} class="ref" fill="${color}">${esc(label)}</text>`;
}

function header(width: number, height: number, title: string, subtitle?: string): string[] {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="DejaVu Sans, Verdana, sans-serif" role="img" aria-labelledby="chart-title">`,
    `<title id="chart-title">${esc(title)}</title>`,
    STYLE,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="12" y="24" class="title">${esc(title)}</text>`,
    subtitle ? `<text x="12" y="44" class="subtitle">${esc(subtitle)}</text>` : "",
  ];
}

/** Legend items in a row from x0, wrapping to the chart's left edge past 840 px. */
function legendSvg(series: { name: string; color: string }[], x0: number, y: number): string[] {
  const widths = series.map((s) => 30 + s.name.length * 6.6);
  // Start at the plot's left edge if the row fits there, else at the chart's.
  let lx = x0 + widths.reduce((a, b) => a + b, 0) > 850 ? 12 : x0;
  return series.map((s, i) => {
    const w = widths[i] as number;
    const item = `<rect x="${r1(lx)}" y="${y}" width="12" height="12" fill="${s.color}"/><text x="${r1(lx + 17)}" y="${y + 10}" class="legend">${esc(s.name)}</text>`;
    lx += w;
    return item;
  });
}

export interface StackedRow {
  label: string;
  sublabel?: string;
  segments: { series: string; value: number }[];
}

const ROW_H = 24;
const ROW_GAP = 16;

/** Horizontal stacked bars: one bar per row, one segment per series, the total at the end. */
export function stackedChart(spec: {
  title: string;
  subtitle?: string;
  series: { name: string; color: string }[];
  rows: StackedRow[];
  axisLabel: string;
  refLines?: RefLine[];
  unit: string;
}): string {
  const left = 230;
  const plotW = WIDTH - left - 80;
  const totals = spec.rows.map((r) => r.segments.reduce((a, s) => a + (Number.isFinite(s.value) ? s.value : 0), 0));
  const max = Math.max(...totals, ...(spec.refLines ?? []).map((r) => r.value), 1);
  const step = niceStep(max * 1.05);
  const axisMax = Math.ceil((max * 1.02) / step) * step;
  const x = (v: number) => left + (v / axisMax) * plotW;
  const { legendY, top } = plotTop(spec);
  const layout: StackLayout = { left, x, unit: spec.unit, colorOf: new Map(spec.series.map((s) => [s.name, s.color])) };
  const body: string[] = [];
  let y = top;
  spec.rows.forEach((row, i) => {
    body.push(...rowSvg(row, totals[i] as number, y, layout));
    y += ROW_H + ROW_GAP;
  });
  const plotBottom = y - ROW_GAP + 6;
  return [
    ...header(WIDTH, r1(plotBottom + 44), spec.title, spec.subtitle),
    ...legendSvg(spec.series, left, legendY),
    ...gridSvg(x, step, axisMax, top, plotBottom, (v) => v.toFixed(0)),
    ...refLinesSvg(spec.refLines, x, top, plotBottom),
    ...body,
    axisLabelSvg(left + plotW / 2, plotBottom, spec.axisLabel),
    "</svg>",
    "",
  ].join("\n");
}

interface StackLayout {
  left: number;
  x: (v: number) => number;
  unit: string;
  colorOf: Map<string, string>;
}

/** One row at y: its label, a segment per positive value (named inside when it has room), the total. */
function rowSvg(row: StackedRow, total: number, y: number, l: StackLayout): string[] {
  const { x, left } = l;
  const out = [
    `<text x="${left - 10}" y="${r1(y + ROW_H / 2 + (row.sublabel ? -1 : 4))}" text-anchor="end" class="group">${esc(row.label)}</text>`,
  ];
  if (row.sublabel) {
    out.push(
      `<text x="${left - 10}" y="${r1(y + ROW_H / 2 + 12)}" text-anchor="end" class="sub">${esc(row.sublabel)}</text>`,
    );
  }
  let acc = 0;
  for (const seg of row.segments) {
    if (!Number.isFinite(seg.value) || seg.value <= 0) continue;
    const x0 = x(acc);
    const w = x(acc + seg.value) - x0;
    out.push(
      `<rect x="${r1(x0)}" y="${r1(y)}" width="${r1(w)}" height="${ROW_H}" fill="${l.colorOf.get(seg.series) ?? "#888"}" stroke="#fff" stroke-width="0.5"><title>${esc(`${row.label} — ${seg.series}: ${seg.value.toFixed(1)} ${l.unit}`)}</title></rect>`,
    );
    if (w > 26) {
      out.push(
        `<text x="${r1(x0 + w / 2)}" y="${r1(y + ROW_H / 2 + 4)}" text-anchor="middle" class="seg">${seg.value.toFixed(0)}</text>`,
      );
    }
    acc += seg.value;
  }
  out.push(
    `<text x="${r1(x(acc) + 6)}" y="${r1(y + ROW_H / 2 + 4)}" class="val">${total.toFixed(0)} ${esc(l.unit)}</text>`,
  );
  return out;
}
