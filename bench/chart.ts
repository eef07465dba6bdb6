import type { LatencySeries } from './series.js';

/**
 * p99 latency against offered rate, one line per service, as a hand-written SVG: both axes are
 * logarithmic, since the tiers double and latency past the break grows by orders of magnitude.
 */
const WIDTH = 760;
const HEIGHT = 440;
const PLOT = { left: 70, right: 170, top: 40, bottom: 60 };
const COLORS: Record<string, string> = { bare: '#777777', redis: '#c0392b', memory: '#2471a3' };
const NAMES: Record<string, string> = {
  bare: 'bare grpc-js',
  redis: 'tollgate, Redis',
  memory: 'tollgate, in-memory',
};

const escape = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** 1, 2, 5 times powers of ten within [low, high]. */
function ticks(low: number, high: number): number[] {
  const values: number[] = [];
  for (let power = Math.floor(Math.log10(low)); 10 ** power <= high; power += 1) {
    for (const step of [1, 2, 5]) {
      const value = step * 10 ** power;
      if (value >= low * 0.999 && value <= high * 1.001) values.push(value);
    }
  }
  return values;
}

function label(value: number, unit: string): string {
  if (unit === 'rps') return value >= 1_000 ? `${value / 1_000}k` : String(value);
  return value < 1 ? String(Number(value.toPrecision(2))) : String(value);
}

export function latencyChart(series: LatencySeries[], title: string, targetMs: number): string {
  const points = series.flatMap((line) =>
    line.tiers.filter((tier) => tier.latencyMs && tier.offeredRps),
  );
  // With no point at all (every call failed), the axes still span the first tiers.
  const rates = points.length ? points.map((tier) => tier.offeredRps!) : [1_000, 10_000];
  const p99s = points.map((tier) => tier.latencyMs!.p99).concat(targetMs);
  // Whole decades around the data, at least one wide.
  const below = (value: number) => 10 ** Math.floor(Math.log10(value) + 1e-9);
  const above = (value: number) => 10 ** Math.ceil(Math.log10(value) - 1e-9);
  const decades = (values: number[]) => {
    const low = below(Math.min(...values));
    return [low, Math.max(above(Math.max(...values)), low * 10)] as const;
  };
  const [xLow, xHigh] = decades(rates);
  const [yLow, yHigh] = decades(p99s);
  const plotWidth = WIDTH - PLOT.left - PLOT.right;
  const plotHeight = HEIGHT - PLOT.top - PLOT.bottom;
  const x = (rate: number) =>
    PLOT.left + (plotWidth * Math.log(rate / xLow)) / Math.log(xHigh / xLow);
  const y = (ms: number) =>
    PLOT.top + plotHeight - (plotHeight * Math.log(ms / yLow)) / Math.log(yHigh / yLow);
  const f = (n: number) => n.toFixed(1);

  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="white"/>`,
    `<text x="${WIDTH / 2}" y="22" text-anchor="middle" font-size="15">${escape(title)}</text>`,
  ];
  for (const rate of ticks(xLow, xHigh)) {
    parts.push(
      `<line x1="${f(x(rate))}" y1="${PLOT.top}" x2="${f(x(rate))}" y2="${PLOT.top + plotHeight}" stroke="#e5e5e5"/>`,
      `<text x="${f(x(rate))}" y="${PLOT.top + plotHeight + 16}" text-anchor="middle">${label(rate, 'rps')}</text>`,
    );
  }
  for (const ms of ticks(yLow, yHigh)) {
    parts.push(
      `<line x1="${PLOT.left}" y1="${f(y(ms))}" x2="${PLOT.left + plotWidth}" y2="${f(y(ms))}" stroke="#e5e5e5"/>`,
      `<text x="${PLOT.left - 6}" y="${f(y(ms) + 4)}" text-anchor="end">${label(ms, 'ms')}</text>`,
    );
  }
  parts.push(
    `<rect x="${PLOT.left}" y="${PLOT.top}" width="${plotWidth}" height="${plotHeight}" fill="none" stroke="#999"/>`,
    `<text x="${PLOT.left + plotWidth / 2}" y="${HEIGHT - 18}" text-anchor="middle">offered rate (requests/s, log scale)</text>`,
    `<text transform="translate(18 ${PLOT.top + plotHeight / 2}) rotate(-90)" text-anchor="middle">p99 latency (ms, log scale)</text>`,
    `<line x1="${PLOT.left}" y1="${f(y(targetMs))}" x2="${PLOT.left + plotWidth}" y2="${f(y(targetMs))}" stroke="#27ae60" stroke-dasharray="6 4"/>`,
    `<text x="${PLOT.left + plotWidth + 6}" y="${f(y(targetMs) + 4)}" fill="#27ae60">target ${targetMs} ms</text>`,
  );
  series.forEach((line, index) => {
    const color = COLORS[line.service] ?? '#000000';
    const tiers = line.tiers.filter((tier) => tier.latencyMs && tier.offeredRps);
    const path = tiers.map((tier) => `${f(x(tier.offeredRps!))},${f(y(tier.latencyMs!.p99))}`);
    if (path.length > 1) {
      parts.push(
        `<polyline points="${path.join(' ')}" fill="none" stroke="${color}" stroke-width="2"/>`,
      );
    }
    for (const tier of tiers) {
      // Hollow past the break, so the edge of each line is visible at a glance.
      const fill = tier.verdict === 'ok' ? color : 'white';
      parts.push(
        `<circle cx="${f(x(tier.offeredRps!))}" cy="${f(y(tier.latencyMs!.p99))}" r="4" fill="${fill}" stroke="${color}" stroke-width="2"><title>${escape(`${line.service} ${tier.offeredRps} req/s: p99 ${tier.latencyMs!.p99.toFixed(2)} ms, ${tier.verdict}`)}</title></circle>`,
      );
    }
    const legendY = PLOT.top + 16 + index * 20;
    const legendX = PLOT.left + plotWidth + 14;
    parts.push(
      `<line x1="${legendX}" y1="${legendY}" x2="${legendX + 22}" y2="${legendY}" stroke="${color}" stroke-width="2"/>`,
      `<text x="${legendX + 28}" y="${legendY + 4}">${escape(NAMES[line.service] ?? line.service)}</text>`,
    );
  });
  const noteY = PLOT.top + 16 + series.length * 20 + 10;
  parts.push(
    `<text x="${PLOT.left + plotWidth + 14}" y="${noteY}" fill="#555">hollow: a tier that</text>`,
    `<text x="${PLOT.left + plotWidth + 14}" y="${noteY + 15}" fill="#555">broke, or past it</text>`,
    '</svg>',
  );
  return `${parts.join('\n')}\n`;
}
