'use strict';
// The paint metrics of one page load, read in the page by both page-load drivers
// (client/load.js over CDP, client/firefox/load.js over WebDriver BiDi): one
// expression, evaluated in the loaded page with its promise awaited, that resolves to
// a JSON string:
//
//   {"fcp_ms": 41.2, "fp_ms": 41.2, "lcp_ms": 96.8,
//    "lcp": {"element": "IMG", "size": 90000, "url": "https://.../hero.png", "id": "",
//            "render_ms": 96.8, "load_ms": 80.1, "candidates": 2},
//    "supported": {"paint": true, "largest-contentful-paint": true},
//    "visibility": "visible", "read_ms": 140.3, "waited_ms": 72.1, "why_null": {}}
//
// Every time is in ms after the navigation's time origin (performance.timeOrigin: the
// start of the navigation to the page), as Paint Timing and LCP define them; a null
// time has its reason in why_null. read_ms is when the entries were taken (the rule
// below) and waited_ms how long this expression waited for that (the rule's cost);
// visibility is the page's then (a page hidden before it painted gets no entries).
// The HAR's onLoad is chrome-har-capturer's in Chromium (from the main request's start,
// a few ms after the time origin) and the Navigation Timing loadEventStart in Firefox
// (the same origin as these), so nav_load_ms (loadEventEnd) is the PLT-like figure on
// the same origin as FCP and LCP.
//
//   fcp_ms  the 'first-contentful-paint' entry of the paint timeline (Paint Timing:
//           Chromium 60+, Firefox 84+); null when the page painted nothing contentful
//           (text, an image that decoded, a non-blank canvas, an SVG): quicbed's
//           synthetic pages (workloads/pages.yaml) have no text and images that do not
//           decode, so their loads give null.
//   lcp_ms  the startTime of the LAST 'largest-contentful-paint' entry a buffered
//           PerformanceObserver delivers (each entry is a larger candidate than the one
//           before, so the last is the largest so far); its element's tag, size
//           (visible area, CSS px squared), URL and id are kept in "lcp". null when the
//           page painted nothing contentful, or when the browser has no such entry type
//           (PerformanceObserver.supportedEntryTypes lacks it, or does not exist:
//           Chromium 72, quicbed's gQUIC client, has Paint Timing but no LCP).
//
// WHEN LCP IS READ (the rule): the driver evaluates this after the load event, after
// every request of the page ended (at most 1 s) and its own SETTLE_MS; here it then
// waits for two animation frames of the page (each capped at FRAME_CAP_MS, for a page
// whose frames do not run) and PAINT_SETTLE_MS more, so that a candidate painted in a
// frame just after the load event, and reported when that frame is presented, is
// counted: typically the page's last image, whose load lets onload fire before it is
// painted (Chromium reported a 300x300 image's LCP 3-22 ms after onload here, every
// time: docs/cell.md). A candidate painted later (a lazy-loaded image, a web font
// swapped in late, content a script adds after onload) is not: LCP here is "the
// largest contentful paint by onload plus two frames and PAINT_SETTLE_MS", not the
// value at user input or page hide that web-vitals reports (no user input ever comes:
// quicbed's loads are headless, and LCP stops at the first input or scroll). Its cost:
// two frames (at most about 33 ms at 60 Hz) plus PAINT_SETTLE_MS per load (51-83 ms
// measured), after the load is measured (no measured figure includes it; a cell takes
// that much longer per load).
// The same wait bounds FCP: a page whose first contentful paint comes later reads null.

// ms after the two frames, for the presentation of the last frame to be reported (the
// browser queues paint and LCP entries when the compositor presents the frame)
const PAINT_SETTLE_MS = 50;
// the most one animation frame is waited for (a page whose frames do not run: hidden)
const FRAME_CAP_MS = 100;

// ES2017 at most (async, arrow functions; no ?. or ??): Chromium 72 runs it too
const PAINT = `(async () => {
  const began = performance.now();
  const PO = typeof PerformanceObserver === 'function' ? PerformanceObserver : null;
  const types = (PO && PO.supportedEntryTypes) || null;
  const paintOk = typeof performance.getEntriesByType === 'function';
  const lcpOk = !!(types && types.indexOf('largest-contentful-paint') >= 0);
  const lcps = [];
  let observer = null;
  if (lcpOk) {
    observer = new PO((list) => { for (const e of list.getEntries()) lcps.push(e); });
    observer.observe({type: 'largest-contentful-paint', buffered: true});
  }
  const frame = () => new Promise((resolve) => {
    const t = setTimeout(resolve, ${FRAME_CAP_MS});
    requestAnimationFrame(() => { clearTimeout(t); resolve(); });
  });
  await frame();
  await frame();
  await new Promise((resolve) => setTimeout(resolve, ${PAINT_SETTLE_MS}));
  if (observer) {
    for (const e of observer.takeRecords()) lcps.push(e);
    observer.disconnect();
  }
  const read = performance.now();
  const paints = paintOk ? performance.getEntriesByType('paint') : [];
  const byName = (n) => { for (const p of paints) if (p.name === n) return p.startTime; return null; };
  const fcp = byName('first-contentful-paint');
  const last = lcps.length ? lcps[lcps.length - 1] : null;
  const why = {};
  if (!paintOk) why.fcp_ms = 'no Paint Timing in this browser';
  else if (fcp === null) why.fcp_ms = 'no first-contentful-paint entry: the page painted nothing contentful by the read';
  if (!lcpOk) why.lcp_ms = types ? 'largest-contentful-paint is not in PerformanceObserver.supportedEntryTypes' :
    'no PerformanceObserver.supportedEntryTypes in this browser (no LCP)';
  else if (!last) why.lcp_ms = 'no largest-contentful-paint entry: the page painted nothing contentful by the read';
  return JSON.stringify({
    fcp_ms: fcp,
    fp_ms: byName('first-paint'),
    lcp_ms: last ? last.startTime : null,
    lcp: last ? {
      element: last.element ? last.element.tagName : null,
      size: last.size,
      url: last.url || '',
      id: last.id || '',
      render_ms: last.renderTime || null,
      load_ms: last.loadTime || null,
      candidates: lcps.length,
    } : null,
    supported: {paint: paintOk, 'largest-contentful-paint': lcpOk},
    visibility: document.visibilityState,
    read_ms: read,
    waited_ms: read - began,
    why_null: why,
  });
})()`;

module.exports = {PAINT, PAINT_SETTLE_MS, FRAME_CAP_MS};
