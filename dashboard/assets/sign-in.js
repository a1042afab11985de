// The sign-in and sign-up pages: one form each, posted as JSON. On success
// the server has set the session cookie; the keys page follows.
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
    await api('POST', form.dataset.endpoint, { email: email.value.trim(), password: password.value });
    location.replace('/dashboard/keys');
  } catch (failure) {
    showError(error, failure);
    password.value = '';
    password.setAttribute('aria-invalid', 'true');
    password.focus();
    submit.disabled = false;
  }
});
