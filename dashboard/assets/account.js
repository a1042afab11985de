// The Account page: the account and its plan's limits, and the data sources
// of the snapshot being served, with their licenses.
import { api, el, format, startPage } from './app.js';

/** A license text with its URLs as links (only http(s) URLs become links). */
function licenseText(text) {
  const parts = [];
  let last = 0;
  for (const match of text.matchAll(/\((https?:\/\/[^)\s]+)\)/g)) {
    parts.push(text.slice(last, match.index));
    const url = match[1];
    parts.push('(', el('a', { href: url, rel: 'noopener', target: '_blank' }, url.replace(/^https?:\/\//, '')), ')');
    last = match.index + match[0].length;
  }
  parts.push(text.slice(last));
  return parts;
}

const KINDS = { tor: 'Tor exits', vpn: 'VPN', proxy: 'Proxies', relay: 'Private relays', hosting: 'Hosting and cloud', asn: 'ASN', geo: 'Location' };

const account = await startPage();
document.getElementById('email').textContent = account.email;
document.getElementById('plan').textContent = account.plan.name;
document.getElementById('created').textContent = format.date(account.created);
document.getElementById('per-day').textContent = format.perDay(account.plan);
document.getElementById('per-second').textContent = account.plan.requests_per_second === null ? 'not available' : format.number(account.plan.requests_per_second);

const about = await api('GET', 'about');
document.getElementById('built').textContent = `Data updated ${format.dateTime(about.sources.built_at)}`;
document.getElementById('sources').replaceChildren(
  ...about.sources.licenses.map((l) => el('tr', {}, el('td', {}, ...licenseText(l.license)), el('td', {}, l.kinds.map((k) => KINDS[k] ?? k).join(', ')))),
);
