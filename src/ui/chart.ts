import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import { html } from './view.js';

export interface ChartSeries {
  label: string;
  color: string;
  dash?: number[];
}

/**
 * A time-series chart drawn by uPlot: x is epoch seconds, each series one line; null
 * values leave a gap. The chart follows its container's width.
 */
export function Chart({
  title,
  series,
  data,
  unit,
  testId,
  gaps = false,
}: {
  title: string;
  series: ChartSeries[];
  data: Array<Array<number | null>>;
  unit: (value: number) => string;
  testId: string;
  /** The series have gaps (null), so each value is marked with a point too. */
  gaps?: boolean;
}) {
  const container = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);

  useEffect(() => {
    const element = container.current;
    if (element === null) return;
    const options: uPlot.Options = {
      width: Math.max(200, element.clientWidth),
      height: 220,
      legend: { live: false },
      // Room on the right for the last time tick's label.
      padding: [8, 24, 0, 0],
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [
        { stroke: '#57606a', grid: { stroke: '#eaeef2' }, values: (_plot, ticks) => ticks.map(clockTime) },
        {
          stroke: '#57606a',
          grid: { stroke: '#eaeef2' },
          size: 64,
          values: (_plot, ticks) => ticks.map((tick) => unit(tick)),
        },
      ],
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: 2,
          spanGaps: false,
          // A lone value between gaps has no line to draw: its point shows it.
          points: { show: gaps, size: 4 },
          ...(s.dash === undefined ? {} : { dash: s.dash }),
          value: (_plot: uPlot, value: number | null) => (value === null ? '—' : unit(value)),
        })),
      ],
    };
    plot.current = new uPlot(options, data as uPlot.AlignedData, element);
    const resize = new ResizeObserver(() => {
      plot.current?.setSize({ width: Math.max(200, element.clientWidth), height: 220 });
    });
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, []);

  useEffect(() => {
    plot.current?.setData(data as uPlot.AlignedData);
  }, [data]);

  return html`<figure class="chart" data-testid=${testId}>
    <figcaption>${title}</figcaption>
    <div ref=${container}></div>
  </figure>`;
}

/** An x tick as a wall-clock time: hours and minutes, with seconds when the tick is not on a whole minute. */
function clockTime(epochSeconds: number): string {
  const date = new Date(epochSeconds * 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  const minutes = `${pad(date.getHours())}:${pad(date.getMinutes())}`;
  return date.getSeconds() === 0 ? minutes : `${minutes}:${pad(date.getSeconds())}`;
}
