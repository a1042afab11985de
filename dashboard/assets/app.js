// What every dashboard page shares: calls to the dashboard's JSON endpoints
// (with the session's CSRF token on every change), the sidebar, the data
// sources footer, dialogs, icons and number and date formats.
//
// Text from the server (key names above all) only ever reaches the page as
// textContent or attribute values, never as HTML.

let csrfToken = null;

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Calls /dashboard/api/<path>; answers the JSON body, or throws ApiError with the server's message. */
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && csrfToken !== null) headers['X-CSRF-Token'] = csrfToken;
  let response;
  try {
    response = await fetch(`/dashboard/api/${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
      cache: 'no-store',
    });
  } catch {
    throw new ApiError(0, 'network', 'The server could not be reached. Check your connection and try again.');
  }
  const data = await response.json().catch(() => null);
  if (response.status === 401 && data?.error === 'signed_out') {
    location.replace('/dashboard/sign-in');
    throw new ApiError(401, 'signed_out', 'Your session has ended. Sign in again.');
  }
  if (!response.ok) throw new ApiError(response.status, data?.error ?? 'error', data?.message ?? `The request failed (HTTP ${response.status}).`);
  return data;
}

/** Uses the CSRF token of a new session (after a password change, which starts one). */
export function useSession(account) {
  csrfToken = account.csrf_token;
}

/** Builds an element: `props` are properties (textContent, className...) or attributes (aria-*, data-*). */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.includes('-') || name === 'role' || name === 'for') node.setAttribute(name, value === true ? '' : String(value));
    else node[name] = value;
  }
  for (const child of children.flat()) if (child !== null && child !== undefined) node.append(child);
  return node;
}

const ICONS = {
  trash: ['M3 6h18', 'M8 6V4h8v2', 'M6 6l1 14h10l1-14', 'M10 11v6', 'M14 11v6'],
  copy: ['M10 9h9a1.5 1.5 0 0 1 1.5 1.5v9A1.5 1.5 0 0 1 19 21h-9a1.5 1.5 0 0 1-1.5-1.5v-9A1.5 1.5 0 0 1 10 9z', 'M5 15H4.5A1.5 1.5 0 0 1 3 13.5v-9A1.5 1.5 0 0 1 4.5 3h9A1.5 1.5 0 0 1 15 4.5V5'],
  edit: ['M12 20h9', 'M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z'],
  refresh: ['M21 12a9 9 0 1 1-2.6-6.4', 'M21 3v6h-6'],
  plus: ['M12 5v14', 'M5 12h14'],
  warning: ['M12 9v4', 'M12 17h.01', 'M10.3 3.9L1.8 18a2 2 0 0 0 1.7 3h17a2 2 0 0 0 1.7-3L13.7 3.9a2 2 0 0 0-3.4 0z'],
  check: ['M20 6L9 17l-5-5'],
};

/** A stroked 24x24 icon, hidden from assistive technology (its button carries the label). */
export function icon(name, size = 18) {
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  for (const [k, v] of Object.entries({ viewBox: '0 0 24 24', width: size, height: size, fill: 'none', stroke: 'currentColor', 'stroke-width': 2, 'stroke-linecap': 'round', 'stroke-linejoin': 'round', 'aria-hidden': 'true', focusable: 'false' })) {
    svg.setAttribute(k, String(v));
  }
  for (const d of ICONS[name]) {
    const path = document.createElementNS('http://www.w3.org/2000/svg', 'path');
    path.setAttribute('d', d);
    svg.append(path);
  }
  return svg;
}

const numberFormat = new Intl.NumberFormat('en-US');
const dateFormat = new Intl.DateTimeFormat('en-US', { year: 'numeric', month: 'short', day: 'numeric' });
const dateTimeFormat = new Intl.DateTimeFormat('en-US', { dateStyle: 'medium', timeStyle: 'medium' });
const relativeFormat = new Intl.RelativeTimeFormat('en-US', { numeric: 'auto' });

export const format = {
  number: (n) => numberFormat.format(n),
  date: (iso) => dateFormat.format(new Date(iso)),
  dateTime: (iso) => dateTimeFormat.format(new Date(iso)),
  /** "just now", "3 minutes ago", "yesterday"... */
  relative(iso) {
    const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
    const abs = Math.abs(seconds);
    if (abs < 45) return 'just now';
    for (const [unit, size] of [['minute', 60], ['hour', 3600], ['day', 86400], ['month', 2592000], ['year', 31536000]]) {
      const next = { minute: 3600, hour: 86400, day: 2592000, month: 31536000, year: Infinity }[unit];
      if (abs < next) return relativeFormat.format(Math.round(seconds / size), unit);
    }
    return dateFormat.format(new Date(iso));
  },
  /** A plan's daily limit, as text. */
  perDay: (plan) => (plan.requests_per_day === null ? (plan.requests_per_second === null ? 'not available' : 'unlimited') : numberFormat.format(plan.requests_per_day)),
};

/** Today's requests against a daily limit: text and a bar. */
export function meter(requests, perDay) {
  const fill = el('div', { className: 'meter-fill' });
  const text = el('span', { className: 'meter-text' }, format.number(requests));
  if (perDay !== null) {
    const share = Math.min(1, requests / perDay);
    fill.style.width = `${(share * 100).toFixed(2)}%`;
    if (share >= 1) fill.classList.add('full');
    else if (share >= 0.8) fill.classList.add('high');
    text.append(el('span', { className: 'of' }, ` / ${format.number(perDay)}`));
  }
  return el(
    'div',
    { className: 'meter' },
    text,
    perDay === null ? null : el('div', { className: 'meter-bar', role: 'img', 'aria-label': `${((requests / perDay) * 100).toFixed(1)}% of the daily limit` }, fill),
  );
}

const trapped = new WeakSet();

/**
 * Keeps Tab and Shift+Tab cycling through the dialog's controls. showModal()
 * makes the page behind inert, but Tab past the last control would still
 * leave the page for the browser's own interface.
 */
function trapFocus(dialog) {
  if (trapped.has(dialog)) return;
  trapped.add(dialog);
  dialog.addEventListener('keydown', (event) => {
    if (event.key !== 'Tab') return;
    const controls = [...dialog.querySelectorAll('button, input, textarea, select, a[href]')].filter((c) => !c.disabled && c.getClientRects().length > 0);
    if (controls.length === 0) return;
    const first = controls[0];
    const last = controls[controls.length - 1];
    if (event.shiftKey && document.activeElement === first) {
      event.preventDefault();
      last.focus();
    } else if (!event.shiftKey && document.activeElement === last) {
      event.preventDefault();
      first.focus();
    }
  });
}

/**
 * Opens a modal dialog: the page behind is inert, Tab stays inside, Escape
 * cancels; when it closes, focus goes back to `returnTo`.
 */
export function openDialog(dialog, returnTo) {
  trapFocus(dialog);
  dialog.addEventListener('close', () => returnTo?.focus(), { once: true });
  dialog.showModal();
  const first = dialog.querySelector('[autofocus]') ?? dialog.querySelector('input, textarea, button');
  first?.focus();
}

/** Shows an error message in an alert region (role="alert" reads it out). */
export function showError(region, error) {
  const message = error instanceof ApiError ? error.message : 'Something went wrong. Try again.';
  region.textContent = message.charAt(0).toUpperCase() + message.slice(1);
}

/** A license text for the footer, without URLs; "DB-IP" links to db-ip.com, as DB-IP asks where its data is shown. */
function creditOf(license) {
  const text = license.replace(/\s*\(https?:[^)]*\)/g, '').replace(/ via .*/, '');
  const phrase = ['IP Geolocation by DB-IP', 'DB-IP'].find((p) => text.includes(p));
  if (!license.includes('db-ip.com') || phrase === undefined) return [text];
  const at = text.indexOf(phrase);
  return [text.slice(0, at), el('a', { href: 'https://db-ip.com', rel: 'noopener', target: '_blank' }, phrase), text.slice(at + phrase.length)];
}

/** Fills the footer with the data sources of the snapshot being served and their licenses; resolves with /about. */
export async function renderAttribution() {
  const footer = document.querySelector('[data-attribution]');
  if (!footer) return null;
  try {
    const about = await api('GET', 'about');
    const credits = about.sources.licenses.flatMap((l, i) => [i === 0 ? '' : ' · ', ...creditOf(l.license)]);
    footer.replaceChildren(el('p', {}, 'IP data: ', ...credits, '.'));
    return about;
  } catch {
    return null;
  }
}

/**
 * Starts a signed-in page: loads the account (and with it the CSRF token),
 * fills the sidebar, marks the current page, wires sign-out. Resolves with
 * the account.
 */
export async function startPage() {
  for (const link of document.querySelectorAll('.nav a')) {
    if (link.getAttribute('href') === location.pathname) link.setAttribute('aria-current', 'page');
  }
  void renderAttribution();
  const account = await api('GET', 'account');
  csrfToken = account.csrf_token;
  document.querySelector('[data-account-email]').textContent = account.email;
  document.querySelector('[data-account-plan]').textContent = `${account.plan.name[0].toUpperCase()}${account.plan.name.slice(1)} plan`;
  document.querySelector('[data-sign-out]').addEventListener('click', async (event) => {
    event.currentTarget.disabled = true;
    try {
      await api('DELETE', 'session');
    } finally {
      location.replace('/dashboard/sign-in');
    }
  });
  return account;
}
