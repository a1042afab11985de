/**
 * Routes on a uWebSockets.js app, for the API and the dashboard alike: GET
 * routes answer HEAD too (the exchange leaves the content out), and a path
 * asked with a method it does not have gets the mounter's 405 with the
 * methods it has.
 */
import type { HttpRequest, HttpResponse, TemplatedApp } from 'uWebSockets.js';

export type Handler = (res: HttpResponse, req: HttpRequest) => void;
export type Method = 'get' | 'post' | 'put' | 'del';

const METHOD_NAMES: Record<Method, string[]> = { get: ['GET', 'HEAD'], post: ['POST'], put: ['PUT'], del: ['DELETE'] };

export class Router {
  readonly #app: TemplatedApp;
  /** Methods per pattern, in the order they were added (the Allow header). */
  readonly #allowed = new Map<string, string[]>();

  constructor(app: TemplatedApp) {
    this.#app = app;
  }

  add(method: Method, pattern: string, handler: Handler): this {
    this.#allowed.set(pattern, [...(this.#allowed.get(pattern) ?? []), ...METHOD_NAMES[method]]);
    this.#app[method](pattern, handler);
    if (method === 'get') this.#app.head(pattern, handler);
    return this;
  }

  /**
   * Answers every other method on the patterns added so far with
   * `methodNotAllowed` (called with the methods allowed and the pattern). Call once all
   * routes are added: uWS prefers a method's own route to `any`.
   */
  refuseOtherMethods(methodNotAllowed: (res: HttpResponse, req: HttpRequest, allowed: string[], pattern: string) => void): void {
    for (const [pattern, allowed] of this.#allowed) this.#app.any(pattern, (res, req) => methodNotAllowed(res, req, allowed, pattern));
  }
}
