// The few HTML pages the simulator serves (the payment page and the dashboard): one escaping function that every
// value goes through, one layout, and one writer that sets the headers that keep the pages from being framed,
// scripted or cached.
import { createHash } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { SimClock } from './clock.js';

/** Escapes text for element content and double- or single-quoted attribute values alike. */
export function esc(value: string | number | boolean | undefined | null): string {
  return String(value ?? '').replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Marks markup built from escaped parts, so a page template can tell it from raw text it must still escape. */
export interface Html {
  readonly html: string;
}

/** A tagged template: interpolated strings are escaped, interpolated Html (and arrays of it) is kept. */
export function html(strings: TemplateStringsArray, ...values: ReadonlyArray<HtmlValue>): Html {
  let out = strings[0] ?? '';
  values.forEach((value, i) => {
    out += render(value) + (strings[i + 1] ?? '');
  });
  return { html: out };
}

export type HtmlValue = Html | readonly Html[] | string | number | boolean | undefined | null;

function render(value: HtmlValue): string {
  if (Array.isArray(value)) return (value as readonly Html[]).map((v) => v.html).join('');
  if (typeof value === 'object' && value !== null) return (value as Html).html;
  return esc(value);
}

const STYLE = [
  'body{font-family:system-ui,sans-serif;margin:2rem;max-width:100rem;color:#1b1b1b}',
  'h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}',
  'table{border-collapse:collapse;font-size:.9rem}td,th{border:1px solid #ccc;padding:.3rem .5rem;text-align:left;vertical-align:top}',
  'th{background:#f3f3f3}code{font-size:.85rem}.muted{color:#666}.nowrap{white-space:nowrap}',
  '.SUCCESS,.accepted{color:#126b12;font-weight:600}.FAILED,.refused{color:#a40000;font-weight:600}',
  '.PENDING{color:#8a5a00;font-weight:600}',
  'form{display:inline-block;margin:1rem 1rem 0 0}',
  'button{font-size:1.1rem;padding:.5rem 1.5rem;border-radius:.3rem;border:1px solid #444;cursor:pointer}',
  'button.pay{background:#126b12;color:#fff}button.decline{background:#fff;color:#a40000;border-color:#a40000}',
].join('\n');

// The style is allowed by its hash instead of 'unsafe-inline': nothing else may style, script or load anything,
// forms may only post back here, and no other site may frame the page (clickjacking a "Pay" button).
const CSP = [
  "default-src 'none'",
  `style-src 'sha256-${createHash('sha256').update(STYLE, 'utf8').digest('base64')}'`,
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

/** Built outside any template, so the formatter cannot change the bytes the CSP hash covers. */
const STYLE_ELEMENT: Html = { html: `<style>${STYLE}</style>` };

export interface PageOptions {
  readonly title: string;
  /** Seconds; adds a meta refresh (the dashboard's optional auto-reload). */
  readonly refreshSeconds?: number;
}

export function page(options: PageOptions, body: Html): string {
  const refresh =
    options.refreshSeconds === undefined
      ? undefined
      : html`<meta http-equiv="refresh" content="${options.refreshSeconds}" />`;
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="referrer" content="no-referrer" />
        ${refresh}
        <title>${options.title}</title>
        ${STYLE_ELEMENT}
      </head>
      <body>
        ${body}
      </body>
    </html> `.html;
}

export function sendHtml(
  res: ServerResponse,
  clock: SimClock,
  status: number,
  text: string,
  headers: Readonly<Record<string, string>> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  res.sendDate = false;
  res.writeHead(status, {
    ...headers,
    date: new Date(clock.nowMs()).toUTCString(),
    'content-type': 'text/html; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
    'content-security-policy': CSP,
    'x-frame-options': 'DENY',
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'cross-origin-opener-policy': 'same-origin',
  });
  res.end(text);
}
