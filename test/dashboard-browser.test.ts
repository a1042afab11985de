// The dashboard end to end in a real headless Chromium (Debian's chromium
// package, driven by playwright-core) against a real server: a wrong password
// refused; sign in; create a key and read it once (copy button included);
// call the API with it; see Last used and today's requests change; a key
// named like a script shown as text; delete through the dialog with the
// keyboard; the API answers 401; after sign-out the pages need signing in;
// a password change ends the other sessions; sign out everywhere.
//
// Screenshots of every page go to $IPR_SCREENSHOTS, or the test's own
// temporary folder: look at them after a change to the pages.
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import t from 'tap';
import { testDir } from './helpers.js';
import { accountStore, check, dash, PASSWORD, signIn, startServer } from './server.js';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];
const XSS_NAME = '<script>alert(1)</script>';
const NEW_PASSWORD = 'a new password for ann';

t.test('the dashboard in Chromium: sign in, create a key, use it, watch it counted, change the password, delete the key, sign out', async (t) => {
  t.ok(existsSync(CHROMIUM), `${CHROMIUM} exists (apt-get install chromium; .ci/run does)`);
  const shots = process.env.IPR_SCREENSHOTS ?? path.join(testDir(t), 'screenshots');
  mkdirSync(shots, { recursive: true });
  t.comment(`screenshots in ${shots}`);

  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'starter');
  const origin = `http://127.0.0.1:${server.port}`;

  const context = await chromium.launchPersistentContext(path.join(testDir(t), 'chromium-profile'), {
    executablePath: CHROMIUM,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 860 },
  });
  t.teardown(() => context.close());
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  const page = context.pages()[0] ?? (await context.newPage());
  const pageErrors: string[] = [];
  const dialogs: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message());
    void dialog.dismiss();
  });
  let shot = 0;
  const screenshot = (name: string) => page.screenshot({ path: path.join(shots, `${String(++shot).padStart(2, '0')}-${name}.png`), fullPage: true });

  // Signed out, the dashboard is the sign-in page. A wrong password is refused.
  await page.goto(`${origin}/dashboard`);
  t.equal(new URL(page.url()).pathname, '/dashboard/sign-in');
  await page.getByLabel('Email').fill('ann@example.com');
  await page.getByLabel('Password').fill('not the password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'Wrong email or password' }).waitFor();
  t.equal(new URL(page.url()).pathname, '/dashboard/sign-in', 'a wrong password: still on the sign-in page');
  await screenshot('sign-in-refused');

  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${origin}/dashboard/keys`);
  await page.getByText('No API keys yet').waitFor();
  t.equal(await page.locator('[data-account-email]').textContent(), 'ann@example.com');
  await screenshot('keys-empty');

  // Create New Key: the key is shown once, with a warning and a copy button.
  await page.getByRole('button', { name: 'Create New Key' }).click();
  const createDialog = page.getByRole('dialog', { name: 'Create a new API key' });
  await createDialog.waitFor();
  t.equal(await page.evaluate(() => document.activeElement?.id), 'key-name', 'the name field has the focus');
  await page.getByLabel('Name', { exact: true }).fill('Production server');
  await screenshot('create-key');
  await createDialog.getByRole('button', { name: 'Create key' }).click();
  const createdDialog = page.getByRole('dialog', { name: 'Your new API key' });
  await createdDialog.waitFor();
  t.match(await createdDialog.textContent(), /shown only this once and cannot be shown again/);
  const key = await page.getByRole('textbox', { name: 'API key', exact: true }).inputValue();
  t.match(key, /^ipr_[A-Za-z0-9_-]{43}$/, 'the full key');
  await createdDialog.getByRole('button', { name: 'Copy' }).click();
  await createdDialog.getByText('Copied to the clipboard.').waitFor();
  t.equal(await page.evaluate(() => navigator.clipboard.readText()), key, 'the copy button copies the key');
  await screenshot('key-created');
  await createdDialog.getByRole('button', { name: 'I have copied the key' }).click();
  await createdDialog.waitFor({ state: 'hidden' });
  t.notOk((await page.content()).includes(key), 'once the dialog is closed the key is nowhere in the page');
  await page.reload();
  const row = page.locator(`tr[data-prefix="${key.slice(0, 8)}"]`);
  await row.waitFor();
  t.notOk((await page.content()).includes(key), 'nor after a reload');

  t.equal(await row.locator('td').nth(0).textContent(), 'Production server');
  t.equal(await row.locator('td').nth(1).textContent(), key.slice(0, 8), 'the prefix: the first 8 characters');
  t.equal(await row.locator('[data-last-used]').textContent(), 'Never');
  t.equal(await row.locator('[data-requests-today] .meter-text').textContent(), '0 / 10,000', "today's requests against the plan's daily limit");
  t.match(await page.locator('#plan-strip').textContent(), /10,000 requests per day.*10 requests per second/);

  // The key works; the page shows the call (Refresh until it does: usage is counted live and persisted every second).
  const ok = await check(server.port, key, { ip: '8.8.8.8' });
  t.equal(ok.status, 200, 'POST /v1/check with the new key');
  let lastUsed = '';
  let today = '';
  for (let i = 0; i < 50 && !(lastUsed !== 'Never' && today.startsWith('1 ')); i++) {
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.waitForTimeout(200);
    lastUsed = (await row.locator('[data-last-used]').textContent()) ?? '';
    today = (await row.locator('[data-requests-today] .meter-text').textContent()) ?? '';
  }
  t.equal(lastUsed, 'just now', 'Last used changed');
  t.equal(today, '1 / 10,000', "today's requests changed");
  await screenshot('keys-used');

  // A key named like a script is shown as text, and nothing runs.
  await page.getByRole('button', { name: 'Create New Key' }).click();
  await page.getByLabel('Name', { exact: true }).fill(XSS_NAME);
  await createDialog.getByRole('textbox', { name: /Allowed source addresses/ }).fill('203.0.113.0/24, 2001:db8::/32');
  await createDialog.getByRole('button', { name: 'Create key' }).click();
  await createdDialog.waitFor();
  await createdDialog.getByRole('button', { name: 'I have copied the key' }).click();
  const xssRow = page.locator('tbody tr').filter({ hasText: XSS_NAME });
  await xssRow.waitFor();
  t.equal(await xssRow.locator('td').nth(0).textContent(), XSS_NAME, 'the name, as text');
  t.equal(await xssRow.locator('td').nth(5).textContent(), '203.0.113.0/24, 2001:db8::/32', 'its allowed source addresses');
  t.equal(await page.locator('tbody script').count(), 0, 'no script element made of it');

  // Usage and Account pages.
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.waitForURL(`${origin}/dashboard/usage`);
  await page.locator('svg.chart').waitFor();
  t.match(await page.locator('#stats').textContent(), /Requests today1 all keys/);
  t.equal(await page.locator('svg.chart rect.bar').count(), 1, 'one day with requests');
  t.match(await page.locator('svg.chart rect.bar title').textContent(), /\(today\): 1 requests$/);
  t.match(await page.locator(`#per-key tr[data-prefix="${key.slice(0, 8)}"]`).textContent(), /Production server.*1 \/ 10,000/);
  await page.getByLabel('Show').selectOption({ label: `Production server (${key.slice(0, 8)})` });
  t.match(await page.locator('svg.chart').getAttribute('aria-label'), /^Requests of Production server: 1 requests/);
  await screenshot('usage');

  await page.getByRole('link', { name: 'Account' }).click();
  await page.waitForURL(`${origin}/dashboard/account`);
  await page.locator('#sources tr').first().waitFor();
  t.equal(await page.locator('#plan').textContent(), 'starter');
  t.equal(await page.locator('#per-day').textContent(), '10,000');
  t.match(await page.locator('.practices').textContent(), /environment variables.*Rotate keys.*separate keys for development and production/s);
  t.ok(await page.locator('#sources a[href="https://db-ip.com"]').count(), 'DB-IP is credited with a link, as it asks');
  t.ok(await page.locator('footer a[href="https://db-ip.com"]').count(), 'in the footer of every page too');
  await screenshot('account');

  // Change the password: the current one is required; the other sessions end; this page goes on (its next change, the delete below, uses the new session).
  const phone = await signIn(server.port, 'ann@example.com');
  await page.getByLabel('Current password').fill('not the password');
  await page.getByLabel('New password').fill(NEW_PASSWORD);
  await page.getByRole('button', { name: 'Change password' }).click();
  await page.getByRole('alert').filter({ hasText: 'The current password is not right' }).waitFor();
  t.equal((await dash(server.port, 'GET', 'account', phone)).status, 200, 'a wrong current password changes nothing');
  await page.getByLabel('Current password').fill(PASSWORD);
  await page.getByLabel('New password').fill(NEW_PASSWORD);
  await page.getByRole('button', { name: 'Change password' }).click();
  await page.getByText('Password changed. Every other session has been signed out.').waitFor();
  t.equal((await dash(server.port, 'GET', 'account', phone)).status, 401, 'the other session ended');
  await screenshot('password-changed');

  // Delete, with the keyboard: the dialog keeps the focus, Escape cancels, then confirm.
  await page.getByRole('link', { name: 'API Keys' }).click();
  await row.waitFor();
  const deleteButton = page.getByRole('button', { name: 'Delete Production server' });
  await deleteButton.focus();
  await page.keyboard.press('Enter');
  const deleteDialog = page.getByRole('dialog', { name: 'Delete this API key?' });
  await deleteDialog.waitFor();
  t.equal(await page.evaluate(() => document.activeElement?.textContent), 'Cancel', 'the safe choice has the focus');
  await screenshot('delete-dialog');
  for (let i = 0; i < 5; i++) {
    await page.keyboard.press('Tab');
    t.ok(await page.evaluate(() => document.getElementById('delete-dialog')!.contains(document.activeElement)), `Tab ${i + 1}: the focus stays in the dialog`);
  }
  await page.keyboard.press('Escape');
  await deleteDialog.waitFor({ state: 'hidden' });
  t.equal(await row.count(), 1, 'Escape cancels: the key is still there');
  t.equal(await page.evaluate(() => document.activeElement?.getAttribute('aria-label')), 'Delete Production server', 'the focus is back on the delete button');
  t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 200, 'and it still works');

  await page.keyboard.press('Enter');
  await deleteDialog.waitFor();
  await page.keyboard.press('Tab');
  t.equal(await page.evaluate(() => document.activeElement?.textContent), 'Delete key');
  await page.keyboard.press('Enter');
  await deleteDialog.waitFor({ state: 'hidden' });
  await row.waitFor({ state: 'detached' });
  t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 401, 'deleted: the API answers 401 at once');
  await screenshot('keys-after-delete');

  await page.setViewportSize({ width: 420, height: 860 });
  await screenshot('keys-narrow');
  await page.setViewportSize({ width: 1280, height: 860 });

  // Sign out: every page needs signing in again.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL(`${origin}/dashboard/sign-in`);
  for (const name of ['keys', 'usage', 'account']) {
    await page.goto(`${origin}/dashboard/${name}`);
    t.equal(new URL(page.url()).pathname, '/dashboard/sign-in', `${name} after sign-out`);
  }
  await screenshot('signed-out');

  // Sign out everywhere, from the Account page: another browser's session ends too.
  const elsewhere = await signIn(server.port, 'ann@example.com', NEW_PASSWORD);
  await page.goto(`${origin}/dashboard/sign-in`);
  await page.getByLabel('Email').fill('ann@example.com');
  await page.getByLabel('Password').fill(NEW_PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${origin}/dashboard/keys`);
  await page.getByRole('link', { name: 'Account' }).click();
  await page.getByRole('button', { name: 'Sign out everywhere' }).click();
  await page.waitForURL(`${origin}/dashboard/sign-in`);
  t.equal((await dash(server.port, 'GET', 'account', elsewhere)).status, 401, 'signed out everywhere');
  await page.goto(`${origin}/dashboard/keys`);
  t.equal(new URL(page.url()).pathname, '/dashboard/sign-in', 'this browser too');

  t.same(dialogs, [], 'no alert ever ran');
  t.same(pageErrors, [], 'no script error on any page');
});
