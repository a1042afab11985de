/**
 * The dashboard's files (the top-level `dashboard/` folder), read once at
 * start and held in memory by each worker, each with its ETag.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const STATIC_DIR = fileURLToPath(new URL('../../dashboard/', import.meta.url));

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.svg': 'image/svg+xml',
};

export interface StaticFile {
  body: Buffer;
  type: string;
  etag: string;
}

function staticFile(body: Buffer, type: string): StaticFile {
  return { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` };
}

/**
 * Every file of the dashboard folder, by its path relative to it
 * ("sign-in.html", "assets/keys.js"). The signed-in pages share one frame:
 * `pages/keys.html` is served as `keys.html`, its content put in
 * `layout.html` in place of {{content}}, with its <h1> as {{title}} and its
 * name as {{page}} (which names its script).
 */
export function loadStatic(): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  for (const entry of readdirSync(STATIC_DIR, { recursive: true, withFileTypes: true })) {
    const type = CONTENT_TYPES[path.extname(entry.name)];
    if (!entry.isFile() || type === undefined) continue;
    const full = path.join(entry.parentPath, entry.name);
    files.set(path.relative(STATIC_DIR, full).split(path.sep).join('/'), staticFile(readFileSync(full), type));
  }
  const layout = files.get('layout.html')!.body.toString('utf8');
  files.delete('layout.html');
  for (const [name, file] of [...files]) {
    const page = /^pages\/([a-z-]+)\.html$/.exec(name)?.[1];
    if (page === undefined) continue;
    files.delete(name);
    const content = file.body.toString('utf8');
    const fields: Record<string, string> = { title: /<h1>([^<]*)<\/h1>/.exec(content)?.[1] ?? page, page, content };
    const html = layout.replace(/\{\{(title|page|content)\}\}/g, (_, field: string) => fields[field]!);
    files.set(`${page}.html`, staticFile(Buffer.from(html), file.type));
  }
  return files;
}
