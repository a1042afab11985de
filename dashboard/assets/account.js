// The Account page: the account and its plan's limits, its password and
// sessions (change the password, sign out everywhere), and the data sources
// of the snapshot being served, with their licenses.
import { api, el, format, showError, startPage, useSession } from './app.js';

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

const passwordForm = document.getElementById('password-form');
const currentPassword = document.getElementById('current-password');
const newPassword = document.getElementById('new-password');
const passwordError = document.getElementById('password-error');
const passwordDone = document.getElementById('password-done');
passwordForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  passwordError.textContent = '';
  passwordDone.textContent = '';
  const missing = [currentPassword, newPassword].find((input) => input.value === '');
  if (missing) {
    passwordError.textContent = missing === currentPassword ? 'Enter your current password.' : 'Enter a new password.';
    missing.focus();
    return;
  }
  const submit = passwordForm.querySelector('button[type="submit"]');
  submit.disabled = true;
  try {
    // A new session for this browser: its cookie is set, its CSRF token is in the answer.
    useSession(await api('PUT', 'password', { current: currentPassword.value, password: newPassword.value }));
    passwordForm.reset();
    passwordDone.textContent = 'Password changed. Every other session has been signed out.';
  } catch (failure) {
    showError(passwordError, failure);
    (failure.code === 'password_wrong' ? currentPassword : newPassword).focus();
  } finally {
    submit.disabled = false;
  }
});

document.getElementById('sign-out-everywhere').addEventListener('click', async (event) => {
  event.currentTarget.disabled = true;
  try {
    await api('DELETE', 'sessions');
  } finally {
    location.replace('/dashboard/sign-in');
  }
});

const about = await api('GET', 'about');
document.getElementById('built').textContent = `Data updated ${format.dateTime(about.sources.built_at)}`;
document.getElementById('sources').replaceChildren(
  ...about.sources.licenses.map((l) => el('tr', {}, el('td', {}, ...licenseText(l.license)), el('td', {}, l.kinds.map((k) => KINDS[k] ?? k).join(', ')))),
);
