// The API Keys page: the table of active keys, Create New Key (the key is
// shown once), delete through a confirmation dialog, allowed source addresses.
import { api, el, format, icon, meter, openDialog, showError, startPage } from './app.js';

const tbody = document.getElementById('keys');
const table = document.getElementById('keys-table');
const noKeys = document.getElementById('no-keys');
const updated = document.getElementById('updated');
const createButton = document.getElementById('create');
const createDialog = document.getElementById('create-dialog');
const createForm = document.getElementById('create-form');
const createError = document.getElementById('create-error');
const createdDialog = document.getElementById('created-dialog');
const newKey = document.getElementById('new-key');
const copyStatus = document.getElementById('copy-status');
const deleteDialog = document.getElementById('delete-dialog');
const deleteError = document.getElementById('delete-error');
const deleteConfirm = document.getElementById('delete-confirm');
const allowedDialog = document.getElementById('allowed-dialog');
const allowedForm = document.getElementById('allowed-form');
const allowedError = document.getElementById('allowed-error');
const allowedList = document.getElementById('allowed-list');

/** The key the open delete or allowed-addresses dialog is about. */
let selected = null;

function addressList(text) {
  return text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

function renderPlan(plan) {
  const strip = document.getElementById('plan-strip');
  strip.replaceChildren(
    el('span', { className: 'badge' }, `${plan.name} plan`),
    el('span', { className: 'limit' }, el('strong', {}, format.perDay(plan)), ' requests per day'),
    el('span', { className: 'limit' }, el('strong', {}, plan.requests_per_second === null ? 'not available' : format.number(plan.requests_per_second)), ' requests per second'),
    el('span', { className: 'limit' }, 'for each key'),
  );
}

function row(key, plan) {
  const lastUsed = key.last_used === null ? el('span', {}, 'Never') : el('time', { dateTime: key.last_used, title: format.dateTime(key.last_used) }, format.relative(key.last_used));
  const allowed = key.allowed.length === 0 ? 'Anywhere' : key.allowed.join(', ');
  const editButton = el('button', { type: 'button', className: 'icon-btn', 'aria-label': `Allowed source addresses of ${key.name}`, title: 'Allowed source addresses' }, icon('edit'));
  const deleteButton = el('button', { type: 'button', className: 'icon-btn delete', 'aria-label': `Delete ${key.name}`, title: 'Delete key' }, icon('trash'));
  editButton.addEventListener('click', () => openAllowed(key, editButton));
  deleteButton.addEventListener('click', () => openDelete(key, deleteButton));
  return el(
    'tr',
    { 'data-prefix': key.prefix },
    el('td', { className: 'name' }, key.name),
    el('td', {}, el('code', { className: 'prefix' }, key.prefix)),
    el('td', { className: 'when' }, el('time', { dateTime: key.created, title: format.dateTime(key.created) }, format.date(key.created))),
    el('td', { className: 'when', 'data-last-used': true }, lastUsed),
    el('td', { 'data-requests-today': true }, meter(key.requests_today, plan.requests_per_day)),
    el('td', { className: 'allowed-list' }, allowed),
    el('td', { className: 'row-actions' }, editButton, deleteButton),
  );
}

async function load() {
  const { plan, keys } = await api('GET', 'keys');
  renderPlan(plan);
  tbody.replaceChildren(...keys.map((key) => row(key, plan)));
  table.hidden = keys.length === 0;
  noKeys.hidden = keys.length !== 0;
  updated.textContent = `Updated ${new Date().toLocaleTimeString('en-US')}`;
}

// Create New Key: name and optional addresses, then the key, once.
createButton.addEventListener('click', () => {
  createForm.reset();
  createError.textContent = '';
  openDialog(createDialog, createButton);
});
createForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  const name = createForm.elements.name;
  name.removeAttribute('aria-invalid');
  if (name.value.trim() === '') {
    name.setAttribute('aria-invalid', 'true');
    createError.textContent = 'Give the key a name.';
    name.focus();
    return;
  }
  const submit = document.getElementById('create-submit');
  submit.disabled = true;
  try {
    const created = await api('POST', 'keys', { name: name.value, allowed: addressList(createForm.elements.allowed.value) });
    createDialog.close();
    newKey.value = created.key;
    copyStatus.textContent = '';
    openDialog(createdDialog, createButton);
    newKey.select();
    await load();
  } catch (failure) {
    showError(createError, failure);
  } finally {
    submit.disabled = false;
  }
});
document.getElementById('copy-key').addEventListener('click', async () => {
  try {
    await navigator.clipboard.writeText(newKey.value);
  } catch {
    // No clipboard API (a page served over plain HTTP from another host): copy the selection.
    newKey.select();
    document.execCommand('copy');
  }
  copyStatus.textContent = 'Copied to the clipboard.';
});
// The key leaves the page when its dialog closes: it is never shown again.
createdDialog.addEventListener('close', () => {
  newKey.value = '';
});

// Delete: confirm, then the key is revoked at once.
function openDelete(key, button) {
  selected = key;
  document.getElementById('delete-name').textContent = key.name;
  document.getElementById('delete-prefix').textContent = key.prefix;
  deleteError.textContent = '';
  deleteConfirm.disabled = false;
  openDialog(deleteDialog, button);
}
deleteConfirm.addEventListener('click', async () => {
  deleteConfirm.disabled = true;
  try {
    await api('DELETE', `keys/${encodeURIComponent(selected.prefix)}`);
    deleteDialog.close();
    await load();
    createButton.focus(); // the row and its button are gone
  } catch (failure) {
    showError(deleteError, failure);
    deleteConfirm.disabled = false;
  }
});

// Allowed source addresses of a key.
function openAllowed(key, button) {
  selected = key;
  document.getElementById('allowed-name').textContent = key.name;
  allowedList.value = key.allowed.join('\n');
  allowedError.textContent = '';
  openDialog(allowedDialog, button);
}
allowedForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  try {
    await api('PUT', `keys/${encodeURIComponent(selected.prefix)}/allowed`, { allowed: addressList(allowedList.value) });
    allowedDialog.close();
    await load();
  } catch (failure) {
    showError(allowedError, failure);
  }
});

for (const dialog of [createDialog, createdDialog, deleteDialog, allowedDialog]) {
  for (const button of dialog.querySelectorAll('[data-close]')) button.addEventListener('click', () => dialog.close());
}
document.getElementById('refresh').addEventListener('click', () => void load());

await startPage();
document.getElementById('snippet').textContent = [
  `curl ${location.origin}/v1/check \\`,
  `  -H "Authorization: Bearer $IPR_API_KEY" \\`,
  `  -H "Content-Type: application/json" \\`,
  `  -d '{"ip": "8.8.8.8"}'`,
].join('\n');
await load();
