/**
 * Loads uWebSockets.js, refusing its fallback: when the native binary does
 * not load, the package quietly returns a slow JavaScript server (with only a
 * console warning). This service must not run on it.
 */
import { createRequire } from 'node:module';
import { IprError } from '../errors.js';

type Uws = typeof import('uWebSockets.js');

function isNative(fn: unknown): boolean {
  return typeof fn === 'function' && Function.prototype.toString.call(fn).includes('[native code]');
}

export function loadUws(): Uws {
  if (process.env.UWS_USE_FALLBACK) {
    throw new IprError('server_failed', 'UWS_USE_FALLBACK is set: refusing to start on the JavaScript fallback of uWebSockets.js');
  }
  const uws = createRequire(import.meta.url)('uWebSockets.js') as Uws;
  if (!isNative(uws.App)) {
    const binary = `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`;
    throw new IprError(
      'server_failed',
      `uWebSockets.js could not load its native binary (${binary}) and fell back to a JavaScript server; refusing to start. ` +
        'Install the version package.json names (npm install) on a supported platform.',
    );
  }
  return uws;
}
