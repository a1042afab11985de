// The Usage page: requests per UTC day over the last 30 days, in total or for
// one key, drawn as an SVG bar chart (with the numbers as a table too), and
// today's requests of each key against the daily limit.
import { api, el, format, meter, startPage } from './app.js';

const SVG = 'http://www.w3.org/2000/svg';
const WIDTH = 960;
const HEIGHT = 280;
const MARGIN = { top: 16, right: 12, bottom: 30, left: 56 };

const select = document.getElementById('series');
let usage = null;

function svg(tag, attributes = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A round step for about `count` grid lines up to `max`. */
function niceStep(max, count = 4) {
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  // Requests are whole numbers: never a step below 1.
  return Math.max(1, [1, 2, 5, 10].map((m) => m * magnitude).find((step) => step >= raw));
}

function dayLabel(day, long = false) {
  return new Date(`${day}T00:00:00Z`).toLocaleDateString('en-US', { month: 'short', day: 'numeric', timeZone: 'UTC', ...(long ? { year: 'numeric' } : {}) });
}

function drawChart(days, values, limit, label) {
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const plotHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
  const peak = Math.max(...values, 1);
  const step = niceStep(peak);
  const top = Math.ceil(peak / step) * step;
  const y = (v) => MARGIN.top + plotHeight - (v / top) * plotHeight;
  const total = values.reduce((a, b) => a + b, 0);
  const chart = svg('svg', { class: 'chart', viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img', 'aria-label': `${label}: ${format.number(total)} requests in the last 30 days` });

  for (let v = 0; v <= top; v += step) {
    chart.append(svg('line', { class: 'grid', x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(v), y2: y(v) }));
    chart.append(svg('text', { class: 'axis-label', x: MARGIN.left - 10, y: y(v) + 4, 'text-anchor': 'end' }, format.number(v)));
  }
  const slot = plotWidth / days.length;
  const barWidth = Math.max(2, slot * 0.68);
  days.forEach((day, i) => {
    const x = MARGIN.left + i * slot + (slot - barWidth) / 2;
    const today = i === days.length - 1;
    if (values[i] > 0) {
      const bar = svg('rect', { class: today ? 'bar today' : 'bar', x, y: y(values[i]), width: barWidth, height: Math.max(1, y(0) - y(values[i])), rx: 2 });
      bar.append(svg('title', {}, `${dayLabel(day, true)}${today ? ' (today)' : ''}: ${format.number(values[i])} requests`));
      chart.append(bar);
    }
    if (i % 5 === 4 || today) {
      chart.append(svg('text', { class: 'axis-label', x: x + barWidth / 2, y: HEIGHT - 10, 'text-anchor': 'middle' }, today ? 'Today' : dayLabel(day)));
    }
  });
  // The daily limit of one key, when it is within the chart's range.
  if (limit !== null && limit <= top) {
    chart.append(svg('line', { class: 'limit-line', x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(limit), y2: y(limit) }));
    chart.append(svg('text', { class: 'limit-label', x: WIDTH - MARGIN.right, y: y(limit) - 5, 'text-anchor': 'end' }, `Daily limit ${format.number(limit)}`));
  }
  document.getElementById('chart').replaceChildren(chart);
  document.getElementById('chart-table').replaceChildren(
    ...days.map((day, i) => el('tr', {}, el('td', {}, `${day}${i === days.length - 1 ? ' (today)' : ''}`), el('td', { className: 'num' }, format.number(values[i])))).reverse(),
  );
}

function render() {
  const { days, keys, total, plan } = usage;
  const chosen = keys.find((k) => k.prefix === select.value);
  if (chosen) drawChart(days, chosen.requests, plan.requests_per_day, `Requests of ${chosen.name}`);
  else drawChart(days, total, null, 'Requests of all keys');
}

async function load() {
  usage = await api('GET', 'usage');
  const { keys, total, plan } = usage;
  const previous = select.value;
  select.replaceChildren(
    el('option', { value: '' }, 'All keys (total)'),
    ...keys.map((k) => el('option', { value: k.prefix }, `${k.name} (${k.prefix}${k.revoked ? ', deleted' : ''})`)),
  );
  if (keys.some((k) => k.prefix === previous)) select.value = previous;

  const today = total[total.length - 1];
  const month = total.reduce((a, b) => a + b, 0);
  const active = keys.filter((k) => k.revoked === null).length;
  const stat = (label, value, note) => el('div', { className: 'card stat' }, el('dt', {}, label), el('dd', {}, value, note ? el('small', {}, ` ${note}`) : null));
  document.getElementById('stats').replaceChildren(
    stat('Requests today', format.number(today), 'all keys'),
    stat('Last 30 days', format.number(month), 'all keys'),
    stat('Active keys', format.number(active)),
    stat('Daily limit', format.perDay(plan), 'per key'),
  );

  document.getElementById('per-key').replaceChildren(
    ...keys.map((k) =>
      el(
        'tr',
        { 'data-prefix': k.prefix },
        el('td', { className: 'name' }, k.name, k.revoked ? el('span', { className: 'badge quiet' }, 'deleted') : null),
        el('td', {}, el('code', { className: 'prefix' }, k.prefix)),
        el('td', {}, k.revoked ? el('span', { className: 'card-note' }, 'Deleted') : meter(k.requests[k.requests.length - 1], plan.requests_per_day)),
        el('td', { className: 'num' }, format.number(k.requests.reduce((a, b) => a + b, 0))),
      ),
    ),
  );
  document.getElementById('no-usage').hidden = keys.length !== 0;
  render();
}

select.addEventListener('change', render);
document.getElementById('refresh').addEventListener('click', () => void load());
await startPage();
await load();
