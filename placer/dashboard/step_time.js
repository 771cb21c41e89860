// The "Step time" tab of `placer dashboard` (placer/dashboard/step_time.py serves it and its data, ./runs).
// Every run its own chart, side by side; in each, every series a colour of its own, named in the legend with its
// last value. Drawn as SVG with no outside resources: the dashboard is served on loopback, often offline.

const SVG = "http://www.w3.org/2000/svg";
// Colours told apart at a glance (Tableau's 10 and two darker ones); the best so far is always the first.
const PALETTE = ["#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#393b79", "#637939"];
// Past the palette, series repeat a colour with another dash pattern.
const DASHES = ["", "2 3", "8 3 2 3"];
const WIDTH = 620, HEIGHT = 340, MARGIN = {left: 64, right: 16, top: 28, bottom: 42};
const REFRESH_MS = 30000;

export async function render() {
  document.title = "Step time";
  Object.assign(document.body.style, {fontFamily: "Roboto, Arial, sans-serif", margin: "16px", color: "#212121"});
  const page = element("div", {id: "step-time-page"});
  document.body.appendChild(page);
  let shown = null;
  const refresh = async () => {
    const response = await fetch("runs");
    const text = await response.text();
    if (text !== shown) {
      shown = text;
      draw(page, JSON.parse(text));
    }
  };
  await refresh();
  setInterval(refresh, REFRESH_MS);
}

function draw(page, data) {
  page.replaceChildren();
  if (!data.runs.length) {
    page.appendChild(element("p", {}, `No step times in ${data.folder} yet: the first update writes them.`));
    return;
  }
  page.appendChild(element("p", {class: "intro"},
    "Step time per update, in milliseconds, unsmoothed: the best placement so far, the median of each update's " +
    "samples, and each baseline as a dashed level line. Runs side by side, each on its own scale."));
  const grid = element("div", {class: "runs"});
  Object.assign(grid.style, {display: "flex", flexWrap: "wrap", gap: "24px"});
  for (const run of data.runs) grid.appendChild(runPanel(run));
  page.appendChild(grid);
}

function runPanel(run) {
  const panel = element("section", {class: "run", "data-run": run.run});
  Object.assign(panel.style, {width: `${WIDTH}px`});
  const title = element("h2", {class: "run-name"}, run.name);
  Object.assign(title.style, {fontSize: "16px", fontWeight: "500", margin: "0 0 4px"});
  panel.appendChild(title);
  const styled = run.series.map((series, i) => ({
    ...series, colour: PALETTE[i % PALETTE.length], dash: seriesDash(series, i),
  }));
  panel.appendChild(chart(styled, run.measured_from));
  panel.appendChild(legend(styled));
  return panel;
}

function seriesDash(series, i) {
  const repeat = DASHES[Math.floor(i / PALETTE.length) % DASHES.length];
  return series.kind === "baseline" && !repeat ? "6 3" : repeat;
}

function chart(series, measuredFrom) {
  const points = series.flatMap(s => s.points);
  const steps = points.map(([step]) => step), values = points.map(([, ms]) => ms);
  const x = scale(Math.min(...steps), Math.max(...steps), MARGIN.left, WIDTH - MARGIN.right);
  const yTicks = niceTicks(Math.min(...values), Math.max(...values));
  const y = scale(yTicks[0], yTicks[yTicks.length - 1], HEIGHT - MARGIN.bottom, MARGIN.top);
  const svg = element("svg", {width: WIDTH, height: HEIGHT, class: "chart"}, null, SVG);

  const decimals = Math.max(0, -Math.floor(Math.log10(yTicks[1] - yTicks[0])));
  for (const tick of yTicks) {
    svg.appendChild(element("line", {x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(tick), y2: y(tick),
                                     stroke: "#e0e0e0"}, null, SVG));
    svg.appendChild(element("text", {x: MARGIN.left - 6, y: y(tick) + 4, "text-anchor": "end", "font-size": 11,
                                     class: "y-tick"}, tick.toFixed(decimals), SVG));
  }
  for (const tick of stepTicks(x.domain[0], x.domain[1])) {
    svg.appendChild(element("text", {x: x(tick), y: HEIGHT - MARGIN.bottom + 16, "text-anchor": "middle",
                                     "font-size": 11, class: "x-tick"}, String(tick), SVG));
  }
  svg.appendChild(element("text", {x: 14, y: (MARGIN.top + HEIGHT - MARGIN.bottom) / 2, "font-size": 12,
                                   "text-anchor": "middle", class: "y-label",
                                   transform: `rotate(-90 14 ${(MARGIN.top + HEIGHT - MARGIN.bottom) / 2})`},
                          "step time (ms)", SVG));
  svg.appendChild(element("text", {x: (MARGIN.left + WIDTH - MARGIN.right) / 2, y: HEIGHT - 6, "font-size": 12,
                                   "text-anchor": "middle", class: "x-label"}, "update", SVG));
  if (measuredFrom !== null && measuredFrom !== undefined) {
    svg.appendChild(phaseSwitch(x(measuredFrom - 0.5)));
  }
  // Baselines first, so that the learned curves are drawn over them.
  for (const s of [...series].reverse()) {
    const path = element("path", {
      class: "series", "data-series": s.name, "data-colour": s.colour, fill: "none", stroke: s.colour,
      "stroke-width": s.kind === "best" ? 2.5 : 1.5, "stroke-dasharray": s.dash,
      d: s.points.map(([step, ms], i) => `${i ? "L" : "M"}${x(step).toFixed(1)},${y(ms).toFixed(1)}`).join(""),
    }, null, SVG);
    path.appendChild(element("title", {}, `${s.label}: ${formatMs(s.points[s.points.length - 1][1])}`, SVG));
    svg.appendChild(path);
    if (s.kind !== "baseline") {
      for (const [step, ms] of s.points) {
        const dot = element("circle", {cx: x(step), cy: y(ms), r: s.kind === "best" ? 2.5 : 2, fill: s.colour},
                            null, SVG);
        dot.appendChild(element("title", {}, `${s.label}, update ${step}: ${formatMs(ms)}`, SVG));
        svg.appendChild(dot);
      }
    }
  }
  return svg;
}

// A vertical line between the last simulated and the first measured update, each side labelled.
function phaseSwitch(at) {
  const group = element("g", {class: "phase-switch"}, null, SVG);
  group.appendChild(element("line", {x1: at, x2: at, y1: MARGIN.top - 8, y2: HEIGHT - MARGIN.bottom,
                                     stroke: "#424242", "stroke-dasharray": "3 3"}, null, SVG));
  group.appendChild(element("text", {x: at - 4, y: MARGIN.top - 12, "text-anchor": "end", "font-size": 11},
                            "← simulated", SVG));
  group.appendChild(element("text", {x: at + 4, y: MARGIN.top - 12, "font-size": 11}, "measured →", SVG));
  return group;
}

function legend(series) {
  const list = element("ul", {class: "legend"});
  Object.assign(list.style, {listStyle: "none", padding: 0, margin: "4px 0 0", columns: 2, fontSize: "13px"});
  for (const s of series) {
    const entry = element("li", {class: "legend-entry", "data-series": s.name});
    const swatch = element("svg", {width: 24, height: 10}, null, SVG);
    swatch.appendChild(element("line", {x1: 0, x2: 24, y1: 5, y2: 5, stroke: s.colour, "stroke-width": 3,
                                        "stroke-dasharray": s.dash, class: "swatch"}, null, SVG));
    entry.appendChild(swatch);
    entry.appendChild(element("span", {class: "label"}, ` ${s.label} `));
    const last = element("span", {class: "value"}, formatMs(s.points[s.points.length - 1][1]));
    last.style.color = "#616161";
    entry.appendChild(last);
    list.appendChild(entry);
  }
  return list;
}

function formatMs(ms) {
  return `${ms.toPrecision(3)} ms`;
}

// Maps [lo, hi] to [from, to]; a single value sits in the middle.
function scale(lo, hi, from, to) {
  const map = value => hi === lo ? (from + to) / 2 : from + (value - lo) * (to - from) / (hi - lo);
  map.domain = [lo, hi];
  return map;
}

// Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi].
function niceTicks(lo, hi) {
  if (hi - lo < 1e-9 * Math.max(1, Math.abs(hi))) {
    const pad = Math.max(Math.abs(hi) * 0.05, 1e-6);
    lo -= pad;
    hi += pad;
  }
  const rough = (hi - lo) / 5, power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map(m => m * power).find(s => s >= rough);
  const ticks = [];
  for (let tick = Math.floor(lo / step) * step; tick < hi + step * 0.999; tick += step) {
    ticks.push(Number(tick.toPrecision(12)));
  }
  return ticks;
}

function stepTicks(lo, hi) {
  const step = Math.max(1, Math.ceil((hi - lo) / 10));
  const ticks = [];
  for (let tick = Math.ceil(lo / step) * step; tick <= hi; tick += step) ticks.push(tick);
  return ticks.length ? ticks : [lo];
}

function element(tag, attributes, text, namespace) {
  const made = namespace ? document.createElementNS(namespace, tag) : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== "" && value !== undefined) made.setAttribute(name, value);
  }
  if (text !== null && text !== undefined) made.textContent = text;
  return made;
}
