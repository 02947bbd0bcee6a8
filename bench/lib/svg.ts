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

export interface ChartSpec {
  title: string;
  subtitle?: string;
  series: { name: string; color: string }[];
  groups: Group[];
  axisLabel: string;
  refLines?: { value: number; label: string; color?: string }[];
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

export function barChart(spec: ChartSpec): string {
  const width = 860;
  const left = 270;
  const fmt = spec.format ?? ((v: number) => (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2)));
  // Room on the right for the longest value label.
  const longest = Math.max(...spec.groups.flatMap((g) => g.bars.map((b) => (b.label ?? fmt(b.value)).length)), 4);
  const right = Math.min(300, Math.max(70, Math.round(longest * 6.4) + 16));
  const plotW = width - left - right;
  const barH = 14;
  const barGap = 3;
  const groupGap = 14;
  const values = spec.groups.flatMap((g) => g.bars.flatMap((b) => [b.value, b.hi ?? b.value]));
  const refs = (spec.refLines ?? []).map((r) => r.value);
  const dataMax = Math.max(...values.filter(Number.isFinite), ...refs, 0) || 1;
  const step = niceStep(spec.max ?? dataMax * 1.05);
  const axisMax = spec.max ?? Math.ceil((dataMax * 1.02) / step) * step;
  const x = (v: number) => left + (Math.max(0, Math.min(v, axisMax)) / axisMax) * plotW;

  const legendY = spec.subtitle ? 56 : 38;
  const nRefs = spec.refLines?.length ?? 0;
  const top = legendY + 30 + 13 * nRefs;
  let y = top;
  const body: string[] = [];
  const colorOf = new Map(spec.series.map((s) => [s.name, s.color]));
  for (const g of spec.groups) {
    const blockH = g.bars.length * (barH + barGap) - barGap;
    const mid = y + blockH / 2;
    body.push(
      `<text x="${left - 10}" y="${r1(mid + (g.sublabel ? -2 : 4))}" text-anchor="end" class="group">${esc(g.label)}</text>`,
    );
    if (g.sublabel)
      body.push(`<text x="${left - 10}" y="${r1(mid + 12)}" text-anchor="end" class="sub">${esc(g.sublabel)}</text>`);
    for (const b of g.bars) {
      const color = colorOf.get(b.series) ?? "#888";
      if (Number.isFinite(b.value)) {
        const w = Math.max(0.5, x(b.value) - left);
        body.push(
          `<rect x="${left}" y="${r1(y)}" width="${r1(w)}" height="${barH}" fill="${color}"><title>${esc(`${g.label} — ${b.series}: ${b.label ?? fmt(b.value)}`)}</title></rect>`,
        );
        if (b.lo !== undefined && b.hi !== undefined && Number.isFinite(b.lo) && Number.isFinite(b.hi)) {
          const cy = r1(y + barH / 2);
          body.push(
            `<path d="M${r1(x(b.lo))} ${cy}H${r1(x(b.hi))}M${r1(x(b.lo))} ${r1(y + 3)}V${r1(y + barH - 3)}M${r1(x(b.hi))} ${r1(y + 3)}V${r1(y + barH - 3)}" class="whisker"/>`,
          );
        }
        const tx = Math.max(x(b.value), b.hi !== undefined && Number.isFinite(b.hi) ? x(b.hi) : 0) + 5;
        body.push(`<text x="${r1(tx)}" y="${r1(y + barH - 3)}" class="val">${esc(b.label ?? fmt(b.value))}</text>`);
      } else {
        body.push(`<text x="${left + 4}" y="${r1(y + barH - 3)}" class="val">n/a</text>`);
      }
      y += barH + barGap;
    }
    y += groupGap - barGap;
  }
  const plotBottom = y;
  const axis: string[] = [];
  for (let v = 0; v <= axisMax + step / 1000; v += step) {
    const xv = r1(x(v));
    axis.push(`<line x1="${xv}" y1="${top - 6}" x2="${xv}" y2="${r1(plotBottom)}" class="grid"/>`);
    axis.push(`<text x="${xv}" y="${r1(plotBottom + 16)}" text-anchor="middle" class="tick">${esc(fmt(v))}</text>`);
  }
  const refsSvg = (spec.refLines ?? []).map((r, i) => {
    const xv = r1(x(r.value));
    const c = r.color ?? "#222";
    return (
      `<line x1="${xv}" y1="${top - 10}" x2="${xv}" y2="${r1(plotBottom)}" stroke="${c}" stroke-width="1.5" stroke-dasharray="5 3"/>` +
      refLabel(xv, top - 10 - (nRefs - 1 - i) * 13, r.label, c, width)
    );
  });
  const legend = legendSvg(spec.series, left, legendY);
  const height = r1(plotBottom + 44);
  return [
    ...header(width, height, spec.title, spec.subtitle),
    ...legend,
    ...axis,
    ...body,
    ...refsSvg,
    `<text x="${left + plotW / 2}" y="${r1(plotBottom + 34)}" text-anchor="middle" class="axis">${esc(spec.axisLabel)}</text>`,
    "</svg>",
    "",
  ].join("\n");
}

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

/** Horizontal stacked bars: one bar per row, one segment per series, the total at the end. */
export function stackedChart(spec: {
  title: string;
  subtitle?: string;
  series: { name: string; color: string }[];
  rows: StackedRow[];
  axisLabel: string;
  refLines?: { value: number; label: string; color?: string }[];
  unit: string;
}): string {
  const width = 860;
  const left = 230;
  const right = 80;
  const plotW = width - left - right;
  const barH = 24;
  const gap = 16;
  const totals = spec.rows.map((r) => r.segments.reduce((a, s) => a + (Number.isFinite(s.value) ? s.value : 0), 0));
  const max = Math.max(...totals, ...(spec.refLines ?? []).map((r) => r.value), 1);
  const step = niceStep(max * 1.05);
  const axisMax = Math.ceil((max * 1.02) / step) * step;
  const x = (v: number) => left + (v / axisMax) * plotW;
  const legendY = spec.subtitle ? 56 : 38;
  const nRefs = spec.refLines?.length ?? 0;
  const top = legendY + 30 + 13 * nRefs;
  const colorOf = new Map(spec.series.map((s) => [s.name, s.color]));
  const body: string[] = [];
  let y = top;
  spec.rows.forEach((row, i) => {
    body.push(
      `<text x="${left - 10}" y="${r1(y + barH / 2 + (row.sublabel ? -1 : 4))}" text-anchor="end" class="group">${esc(row.label)}</text>`,
    );
    if (row.sublabel) {
      body.push(
        `<text x="${left - 10}" y="${r1(y + barH / 2 + 12)}" text-anchor="end" class="sub">${esc(row.sublabel)}</text>`,
      );
    }
    let acc = 0;
    for (const seg of row.segments) {
      if (!Number.isFinite(seg.value) || seg.value <= 0) continue;
      const x0 = x(acc);
      const w = x(acc + seg.value) - x0;
      body.push(
        `<rect x="${r1(x0)}" y="${r1(y)}" width="${r1(w)}" height="${barH}" fill="${colorOf.get(seg.series) ?? "#888"}" stroke="#fff" stroke-width="0.5"><title>${esc(`${row.label} — ${seg.series}: ${seg.value.toFixed(1)} ${spec.unit}`)}</title></rect>`,
      );
      if (w > 26) {
        body.push(
          `<text x="${r1(x0 + w / 2)}" y="${r1(y + barH / 2 + 4)}" text-anchor="middle" class="seg">${seg.value.toFixed(0)}</text>`,
        );
      }
      acc += seg.value;
    }
    body.push(
      `<text x="${r1(x(acc) + 6)}" y="${r1(y + barH / 2 + 4)}" class="val">${(totals[i] as number).toFixed(0)} ${esc(spec.unit)}</text>`,
    );
    y += barH + gap;
  });
  const plotBottom = y - gap + 6;
  const axis: string[] = [];
  for (let v = 0; v <= axisMax + step / 1000; v += step) {
    const xv = r1(x(v));
    axis.push(`<line x1="${xv}" y1="${top - 6}" x2="${xv}" y2="${r1(plotBottom)}" class="grid"/>`);
    axis.push(`<text x="${xv}" y="${r1(plotBottom + 16)}" text-anchor="middle" class="tick">${v.toFixed(0)}</text>`);
  }
  const refs = (spec.refLines ?? []).map((r, i) => {
    const xv = r1(x(r.value));
    const c = r.color ?? "#222";
    return (
      `<line x1="${xv}" y1="${top - 10}" x2="${xv}" y2="${r1(plotBottom)}" stroke="${c}" stroke-width="1.5" stroke-dasharray="5 3"/>` +
      refLabel(xv, top - 10 - (nRefs - 1 - i) * 13, r.label, c, width)
    );
  });
  const height = r1(plotBottom + 44);
  return [
    ...header(width, height, spec.title, spec.subtitle),
    ...legendSvg(spec.series, left, legendY),
    ...axis,
    ...refs,
    ...body,
    `<text x="${left + plotW / 2}" y="${r1(plotBottom + 34)}" text-anchor="middle" class="axis">${esc(spec.axisLabel)}</text>`,
    "</svg>",
    "",
  ].join("\n");
}
