// The sign-in and sign-up pages: one form each, posted as JSON. A sign-in
// sets the session cookie; a sign-up signs nobody in (its answer is the same
// whether the email had an account), so the page signs in next. Then the
// keys page follows.
import { api, renderAttribution, showError } from './app.js';

const form = document.querySelector('form');
const error = document.getElementById('error');
const email = document.getElementById('email');
const password = document.getElementById('password');
const submit = form.querySelector('button[type="submit"]');

renderAttribution().then((about) => {
  if (about?.signup) document.getElementById('sign-up-link')?.removeAttribute('hidden');
});

form.addEventListener('submit', async (event) => {
  event.preventDefault();
  error.textContent = '';
  for (const input of [email, password]) input.removeAttribute('aria-invalid');
  const missing = [email, password].find((input) => input.value.trim() === '');
  if (missing) {
    missing.setAttribute('aria-invalid', 'true');
    error.textContent = missing === email ? 'Enter your email address.' : 'Enter your password.';
    missing.focus();
    return;
  }
  submit.disabled = true;
  try {
    const credentials = { email: email.value.trim(), password: password.value };
    await api('POST', form.dataset.endpoint, credentials);
    if (form.dataset.endpoint === 'sign-up') await api('POST', 'session', credentials);
    location.replace('/dashboard/keys');
  } catch (failure) {
    showError(error, failure);
    password.value = '';
    password.setAttribute('aria-invalid', 'true');
    password.focus();
    submit.disabled = false;
  }
});
