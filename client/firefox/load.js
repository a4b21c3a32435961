'use strict';
// quicbed's page-load driver for Firefox. Talks WebDriver BiDi (W3C; Firefox's Remote
// Agent, no driver binary) to one running Firefox and loads pages on request, with the
// protocol of client/load.js: one JSON command per stdin line, one JSON result per
// stdout line:
//
//   {"cmd": "load", "url": "https://quicbed.test/5kb/", "fresh_context": false, "timeout_ms": 60000,
//    "visual": false}
//   -> {"ok": true, "error": null, "har": {...}, "nav": {...}, "paint": {...}, "visual": {...}, "context": "...",
//       "started_at": ms, "clearing": {...}, "connections_closed": {...}}
//
//   node load.js PORT HOST SERVER_IP [HOST2 IP2 ...]   (a replayed page: every origin)
//
// Firefox is started by quicbed (quicbed/client/firefox.py) with a throwaway profile
// (user.js: HTTP/3 forced to the test origin or turned off, everything that calls home
// off, every host name resolved to the client's own loopback) and with
// --remote-allow-system-access, which lets this driver run privileged script in the
// browser's parent process (BiDi script.evaluate in a "chrome" context). It uses that
// for what no web-facing API offers and chrome.benchmarking offers in Chromium:
//
//   hello  HOST -> SERVER_IP in Firefox's own resolver (nsINativeDNSResolverOverride;
//          every other name stays on loopback: network.dns.native-is-localhost), the
//          HTTP cache bypassed for every load (BiDi network.setCacheBehavior, as the
//          Chromium driver's Network.setCacheDisabled), and the alt-svc store opened
//          before the first load (see ALTSVC_INIT).
//   before every load, in the kept tab (fresh_context=false, 0-RTT mode) and before
//          a new user context's first (fresh_context=true, 1-RTT mode):
//     cache        Services.cache2.clear()
//     host_cache   Services.dns.clearCache(true)
//     http3_excluded  network:reset-http3-excluded-list (an origin Firefox gave up
//                  HTTP/3 for after a failure is not left on TCP for the next load)
//     connections  net:prune-all-connections (every idle connection closed, every
//                  active one marked not to be reused: Chromium's closeConnections),
//                  then awaited: the load starts only once nsIDashboard lists no
//                  connection to HOST any more (an HTTP/3 connection is listed until
//                  its closing period ends), else it fails naming what is left.
//                  TLS session tickets and QUIC resumption tokens stay (the SSL tokens
//                  cache), so the next connection can be 0-RTT.
//   fresh_context=true: a new BiDi user context (its own cookie jar, TLS session cache,
//          token cache and connection pool: no resumption), removed when the next
//          command arrives, not at the end of its load: quicbed asks the server's kernel
//          what the load's TCP connections ran after the load returns, and removing the
//          context closes them (as client/load.js does with Chromium's contexts; before,
//          Firefox's h2 loads passed only because its closing sockets lingered).
//
// The HAR (1.2) is built here from the BiDi network events (request, status, headers,
// FetchTimingInfo) and the page's Resource Timing (the protocol, nextHopProtocol, and
// the body sizes); the two must agree on every entry's protocol, or the load fails.
// pageTimings.onLoad is the Navigation Timing loadEventStart (ms after the navigation
// start, the page's timeOrigin); docs/browsers.md says how that differs from
// chrome-har-capturer's onLoad. data: URLs are left out (the page's favicon is one),
// as chrome-har-capturer leaves them out, and so are requests the browser answered from
// its own cache (BiDi's fromCache: a second request of an image already on its way),
// which reach no server: their URLs are the page's _servedFromCache.
// "paint" is the page's first contentful paint and largest contentful paint, read in the
// page after the load by the expression client/load.js uses (client/paint.js says what
// and when). "visual" (only when the command asks) is the load's frames, from the Gecko
// profiler's screenshots (client/visual.js says how).

const readline = require('readline');
const WebSocket = require('ws');
const {PAINT} = require('../paint');
const {geckoStart, stopped, GECKO_HIDE_STATUS} = require('../visual');

const [port, ...pairs] = process.argv.slice(2);
// every host the page names and the address it is served at (the test host, or each
// origin of a replayed page); the first is the page's own
const MAPS = [];
for (let i = 0; i + 1 < pairs.length; i += 2) MAPS.push([pairs[i], pairs[i + 1]]);
const HOSTS = MAPS.map(([h]) => h);
// after the load event and every request's end: a margin for the last BiDi events
const SETTLE_MS = 20;
// how long the closed connections get to leave nsIDashboard's list: an HTTP/3
// connection stays in it for its closing period, 3 PTO (~0.3 s at 36 ms RTT, ~0.8 s at
// 112 ms; seconds at 400 ms RTT with loss, where the RTT variance grows)
const DROP_WAIT_MS = 10000;

// --- WebDriver BiDi over one WebSocket -------------------------------------------------
let ws;
let nextId = 0;
const pending = new Map();
const listeners = new Set();

function connect() {
    return new Promise((resolve, reject) => {
        ws = new WebSocket(`ws://127.0.0.1:${port}/session`);
        ws.on('open', resolve);
        ws.on('error', reject);
        ws.on('close', () => {
            for (const {reject: rej} of pending.values()) rej(new Error('the browser closed the BiDi connection'));
            pending.clear();
        });
        ws.on('message', (data) => {
            const m = JSON.parse(data);
            if (m.id !== undefined && pending.has(m.id)) {
                const {resolve: res, reject: rej} = pending.get(m.id);
                pending.delete(m.id);
                if (m.type === 'error') rej(new Error(`${m.error}: ${m.message}`));
                else res(m.result);
            } else if (m.type === 'event') {
                for (const l of listeners) l(m);
            }
        });
    });
}

function send(method, params = {}) {
    return new Promise((resolve, reject) => {
        const id = ++nextId;
        pending.set(id, {resolve, reject});
        ws.send(JSON.stringify({id, method, params}));
    });
}

let chrome;  // a browsing context of the parent process (privileged script)

async function evaluate(context, expression) {
    const r = await send('script.evaluate', {expression, target: {context}, awaitPromise: true,
        resultOwnership: 'none'});
    if (r.type === 'exception') throw new Error(`script failed: ${r.exceptionDetails.text}`);
    return r.result.value;
}

function withTimeout(promise, ms, what) {
    let timer;
    const t = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms); });
    return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

// --- privileged steps (parent process) -----------------------------------------------
const MAP_HOST = (host, ip) => `(() => {
  Cc["@mozilla.org/network/native-dns-override;1"].getService(Ci.nsINativeDNSResolverOverride)
    .addIPOverride(${JSON.stringify(host)}, ${JSON.stringify(ip)});
  return true;
})()`;

// The alt-svc store (where network.http.http3.alt-svc-mapping-for-testing's mapping
// lives) is opened by the first HTTPS request and read from disk asynchronously; a
// request made before it is ready does not see the mapping and goes over TCP (to a port
// where no TCP server listens: the first h3 load would fail). One request to a name
// that resolves to loopback opens it without a packet leaving the client; a short wait
// lets the read finish (the first load's protocol is checked like every load's).
// The request goes to loopback port ALTSVC_INIT_PORT (a port no browser bans and no
// service uses), refused there: the hello names it, so a capture can tell it apart.
const ALTSVC_INIT_PORT = 4;
const ALTSVC_INIT = `(async () => {
  await fetch("https://quicbed-altsvc-init.invalid:${ALTSVC_INIT_PORT}/").catch(() => null);
  await new Promise((r) => setTimeout(r, 100));
  return true;
})()`;

const CLEAR = `(() => {
  Services.cache2.clear();
  Services.dns.clearCache(true);
  Services.obs.notifyObservers(null, "network:reset-http3-excluded-list");
  Services.obs.notifyObservers(null, "net:prune-all-connections");
  return true;
})()`;

const CLEARING = {
    cache: 'Services.cache2.clear()',
    host_cache: 'Services.dns.clearCache(true)',
    http3_excluded: 'network:reset-http3-excluded-list',
    predictor: 'off in the profile (network.predictor.enabled, speculative connections 0)',
    connections: 'net:prune-all-connections, awaited in nsIDashboard',
};

// the page's hosts' connections in nsIDashboard: [{port, httpVersion, active, idle, half_open}]
const CONNECTIONS = `new Promise((resolve) => {
  Cc["@mozilla.org/network/dashboard;1"].getService(Ci.nsIDashboard).requestHttpConnections((d) => {
    resolve(JSON.stringify((d.connections || []).filter((c) => ${JSON.stringify(HOSTS)}.includes(c.host))
      .map((c) => ({port: c.port, httpVersion: c.httpVersion, active: c.active.length,
        idle: c.idle.length, half_open: (c.dnsAndSocks || []).length}))
      .filter((c) => c.active || c.idle || c.half_open)));
  });
})`;

async function closeConnections() {
    await evaluate(chrome, CLEAR);
    const t0 = Date.now();
    const before = JSON.parse(await evaluate(chrome, CONNECTIONS));
    let left = before;
    while (left.length && Date.now() - t0 < DROP_WAIT_MS) {
        await new Promise((r) => setTimeout(r, 5));
        left = JSON.parse(await evaluate(chrome, CONNECTIONS));
    }
    if (left.length) {
        throw new Error(`could not close the browser's connections before the load: ` +
            `${JSON.stringify(left)} still open after ${DROP_WAIT_MS} ms`);
    }
    return {open_before: before, waited_ms: Date.now() - t0};
}

// --- the page's own timing (content process) -------------------------------------------
const PERF = `JSON.stringify({
  origin: performance.timeOrigin,
  nav: (performance.getEntriesByType("navigation")[0] || null),
  resources: performance.getEntriesByType("resource"),
})`;

// --- HAR ------------------------------------------------------------------------------
function headers(list) {
    return (list || []).map((h) => ({name: h.name, value: h.value && h.value.type === 'string' ? h.value.value : String((h.value || {}).value || '')}));
}

function iso(ms) {
    return new Date(ms).toISOString();
}

function timingsOf(t) {
    // FetchTimingInfo: epoch ms, 0 where a phase did not happen (a reused connection)
    const has = (x) => typeof x === 'number' && x > 0;
    const span = (a, b) => (has(a) && has(b) ? b - a : -1);
    const start = t.requestTime;
    const first = [t.dnsStart, t.connectStart, t.requestStart].find(has);
    return {
        start,
        end: has(t.responseEnd) ? t.responseEnd : null,
        timings: {
            blocked: has(first) ? first - start : -1,
            dns: span(t.dnsStart, t.dnsEnd),
            connect: span(t.connectStart, t.connectEnd),  // includes the TLS (or QUIC) handshake
            send: 0,  // BiDi has no end of the request's send: it is in wait
            wait: span(t.requestStart, t.responseStart),
            receive: span(t.responseStart, t.responseEnd),
            ssl: span(t.tlsStart, t.tlsEnd),
        },
    };
}

// The decoded body's size: Resource Timing's, else WebDriver BiDi's count of the
// response's content; unknown (-1) where both read 0 for a response of another origin
// than the page's: Resource Timing shows a cross-origin no-cors response's sizes as 0
// (Fetch: only a CORS-same-origin response's sizes are exposed, Timing-Allow-Origin
// or not), and Firefox's BiDi counts none, so 0 would be a guess, not a measurement.
function bodySize(rt, resp, url, pageUrl) {
    const rtSize = rt ? rt.decodedBodySize : -1;
    const bidi = resp && resp.content && typeof resp.content.size === 'number' ? resp.content.size : -1;
    if (rtSize > 0) return rtSize;
    if (bidi > 0) return bidi;
    let other = false;
    try { other = new URL(url).origin !== new URL(pageUrl).origin; } catch (e) { /* not a URL */ }
    return other ? -1 : rtSize;
}

function buildHar(url, requests, perf, browserVersion) {
    const nav = perf.nav || {};
    const byUrl = new Map((perf.resources || []).map((r) => [r.name, r]));
    const problems = [];
    const entries = [];
    const fromCache = [];
    for (const r of requests) {
        const req = r.request;
        if (req.url.startsWith('data:')) continue;
        // answered by the browser from its own cache (an image the page asks for twice
        // while its first request is under way: BiDi's fromCache, no bytes, no timings,
        // protocol "http/1.1"): no request on the network, listed apart, not an entry
        if (r.response && r.response.fromCache === true) {
            fromCache.push(req.url);
            continue;
        }
        const isDocument = r.navigation !== null && r.navigation !== undefined && req.url === nav.name;
        const rt = isDocument ? nav : byUrl.get(req.url);
        const resp = r.response || null;
        const bidiProto = resp ? String(resp.protocol || '') : '';
        const rtProto = rt ? String(rt.nextHopProtocol || '') : '';
        if (rt && resp && rtProto && bidiProto && rtProto.toLowerCase() !== bidiProto.toLowerCase()) {
            problems.push(`protocol of ${req.url}: Resource Timing ${rtProto}, WebDriver BiDi ${bidiProto}`);
        }
        const t = timingsOf(req.timings || {});
        const end = t.end || r.failedAt || t.start;
        entries.push({
            pageref: 'page_1',
            startedDateTime: iso(t.start),
            time: end - t.start,
            request: {
                method: req.method,
                url: req.url,
                httpVersion: rtProto || bidiProto || 'unknown',
                cookies: [],
                headers: headers(req.headers),
                queryString: [],
                headersSize: typeof req.headersSize === 'number' ? req.headersSize : -1,
                bodySize: typeof req.bodySize === 'number' ? req.bodySize : -1,
            },
            response: {
                status: resp ? resp.status : 0,
                statusText: resp ? resp.statusText : '',
                httpVersion: rtProto || bidiProto || 'unknown',
                cookies: [],
                headers: headers(resp ? resp.headers : []),
                redirectURL: '',
                headersSize: resp && typeof resp.headersSize === 'number' ? resp.headersSize : -1,
                bodySize: rt ? rt.encodedBodySize : (resp && typeof resp.bodySize === 'number' ? resp.bodySize : -1),
                _transferSize: resp && typeof resp.bytesReceived === 'number' ? resp.bytesReceived : -1,
                content: {
                    size: bodySize(rt, resp, req.url, url),
                    mimeType: resp ? resp.mimeType || '' : '',
                },
                ...(r.error ? {_error: r.error} : {}),
            },
            cache: {},
            timings: t.timings,
            _protocols: {resource_timing: rtProto || null, bidi: bidiProto || null},
            _resourceTiming: rt ? {
                nextHopProtocol: rt.nextHopProtocol, transferSize: rt.transferSize,
                encodedBodySize: rt.encodedBodySize, decodedBodySize: rt.decodedBodySize,
                responseStatus: rt.responseStatus, startTime: rt.startTime, connectStart: rt.connectStart,
                secureConnectionStart: rt.secureConnectionStart, connectEnd: rt.connectEnd,
                requestStart: rt.requestStart, responseStart: rt.responseStart, responseEnd: rt.responseEnd,
            } : null,
        });
    }
    const har = {
        log: {
            version: '1.2',
            creator: {name: 'quicbed client/firefox/load.js (WebDriver BiDi)', version: '1'},
            browser: {name: 'Firefox', version: browserVersion},
            pages: [{
                id: 'page_1',
                title: url,
                startedDateTime: iso(perf.origin),
                pageTimings: {
                    onContentLoad: nav.domContentLoadedEventStart > 0 ? nav.domContentLoadedEventStart : -1,
                    onLoad: nav.loadEventStart > 0 ? nav.loadEventStart : -1,
                },
                _timeOrigin: perf.origin,
                _servedFromCache: fromCache,
            }],
            entries,
        },
    };
    return {har, problems};
}

// --- one load ----------------------------------------------------------------------------
let kept = null;  // the 0-RTT mode's tab: the window's first, in the default user context
let spent = null; // the last 1-RTT load's tab and user context, removed at the next command
let initial = null;
let version = '';

async function openTab(userContext) {
    const {context} = await send('browsingContext.create', {type: 'tab', userContext});
    return {context, userContext};
}

// the tab's viewport as the browser draws it now (a visual load's final look), base64 PNG
async function screenshot(context) {
    return (await send('browsingContext.captureScreenshot', {context, origin: 'viewport'})).data;
}

async function closeTab(tab) {
    try { await send('browsingContext.close', {context: tab.context}); } catch (e) { /* gone */ }
    if (tab.userContext) {
        try { await send('browser.removeUserContext', {userContext: tab.userContext}); } catch (e) { /* gone */ }
    }
}

async function load(cmd) {
    if (spent) {
        await closeTab(spent);
        spent = null;
    }
    const started_at = Date.now();
    let tab;
    if (cmd.fresh_context) {
        const {userContext} = await send('browser.createUserContext', {});
        tab = await openTab(userContext);
    } else {
        if (!kept) kept = {context: initial, userContext: null};
        tab = kept;
    }
    const requests = new Map();  // BiDi request id -> {request, response, navigation, error}
    const order = [];
    let recording = false;
    // the tab and every frame under it: an iframe is a browsing context of its own, whose
    // requests (a cross-site ad frame's document and images) are the page's too
    const frames = new Set([tab.context]);
    const listener = (m) => {
        const p = m.params || {};
        if (m.method === 'browsingContext.contextCreated') {
            if (frames.has(p.parent)) frames.add(p.context);
            return;
        }
        if (!recording || !frames.has(p.context)) return;
        const id = p.request && p.request.request;
        if (m.method === 'network.beforeRequestSent') {
            if (!requests.has(id)) { requests.set(id, {request: p.request, navigation: p.navigation, response: null, done: false}); order.push(id); }
        } else if (m.method === 'network.responseCompleted') {
            const r = requests.get(id);
            if (r) { r.request = p.request; r.response = p.response; r.done = true; }
        } else if (m.method === 'network.fetchError') {
            const r = requests.get(id);
            if (r) { r.request = p.request; r.error = p.errorText; r.failedAt = p.timestamp; r.done = true; }
        }
    };
    listeners.add(listener);
    let closed = null;
    let capture = null;
    const base = {context: tab.userContext || 'default', target: tab.context, started_at, clearing: CLEARING};
    try {
        await send('browsingContext.navigate', {context: tab.context, url: 'about:blank', wait: 'complete'});
        closed = await closeConnections();
        if (cmd.visual) capture = await geckoStart(evaluate, chrome, tab.context);
        recording = true;
        await withTimeout(send('browsingContext.navigate', {context: tab.context, url: cmd.url, wait: 'complete'}),
            cmd.timeout_ms || 60000, 'page load');
        const until = Date.now() + 1000;
        while ([...requests.values()].some((r) => !r.done) && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
        await new Promise((r) => setTimeout(r, SETTLE_MS));
        recording = false;
        const perf = JSON.parse(await evaluate(tab.context, PERF));
        const {har, problems} = buildHar(cmd.url, order.map((id) => requests.get(id)), perf, version);
        // after the HAR (recording stopped): a failed read is "paint": {error}, no failure
        let paint;
        try {
            paint = JSON.parse(await evaluate(tab.context, PAINT));
        } catch (e) {
            paint = {error: `paint read failed: ${e.message || e}`};
        }
        const visual = capture ? await stopped(capture, tab.context, screenshot) : undefined;
        capture = null;
        const unfinished = [...requests.values()].filter((r) => !r.done).map((r) => r.request.url);
        if (unfinished.length) problems.push(`requests without an end: ${unfinished.join(', ')}`);
        return {ok: problems.length === 0, error: problems.length ? problems.join('; ') : null, har, nav: perf.nav,
            paint, visual, ...base, connections_closed: closed};
    } catch (e) {
        recording = false;
        let har = null;
        try {
            har = buildHar(cmd.url, order.map((id) => requests.get(id)), {origin: started_at, nav: null, resources: []}, version).har;
        } catch (e2) { /* incomplete */ }
        // stop whatever is still loading, so the next load starts from a blank tab
        try { await send('browsingContext.navigate', {context: tab.context, url: 'about:blank', wait: 'none'}); } catch (e3) { /* gone */ }
        return {ok: false, error: String(e.message || e), har, nav: null, paint: null, ...base, connections_closed: closed};
    } finally {
        if (capture) await capture.abort();
        listeners.delete(listener);
        if (cmd.fresh_context) spent = tab;
    }
}

async function main() {
    await connect();
    const session = await send('session.new', {capabilities: {}});
    const caps = session.capabilities || {};
    version = `${caps.browserName === 'firefox' ? 'Firefox' : caps.browserName}/${caps.browserVersion}`;
    const tree = await send('browsingContext.getTree', {'moz:scope': 'chrome', maxDepth: 0});
    if (!tree.contexts.length) throw new Error('no chrome context: was Firefox started with --remote-allow-system-access?');
    chrome = tree.contexts[0].context;
    initial = (await send('browsingContext.getTree', {maxDepth: 0})).contexts[0].context;
    for (const [host, ip] of MAPS) await evaluate(chrome, MAP_HOST(host, ip));
    await send('network.setCacheBehavior', {cacheBehavior: 'bypass'});
    await send('session.subscribe', {events: ['network.beforeRequestSent', 'network.responseCompleted', 'network.fetchError',
        'browsingContext.contextCreated']});
    await evaluate(chrome, ALTSVC_INIT);
    await evaluate(chrome, GECKO_HIDE_STATUS);
    process.stdout.write(JSON.stringify({ready: true, browser: version, build: caps['moz:buildID'] || null,
        user_agent: caps.userAgent || null, pid: caps['moz:processID'] || null,
        altsvc_init_port: ALTSVC_INIT_PORT}) + '\n');
    const rl = readline.createInterface({input: process.stdin});
    for await (const line of rl) {
        if (!line.trim()) continue;
        let cmd;
        try { cmd = JSON.parse(line); } catch (e) {
            process.stdout.write(JSON.stringify({ok: false, error: `bad command: ${e.message}`}) + '\n');
            continue;
        }
        if (cmd.cmd === 'quit') break;
        const result = await load(cmd);
        process.stdout.write(JSON.stringify(result) + '\n');
    }
    if (spent) await closeTab(spent);
    try { await send('session.end', {}); } catch (e) { /* gone */ }
    ws.close();
    process.exit(0);
}

main().catch((e) => {
    process.stdout.write(JSON.stringify({ready: false, error: String(e.message || e)}) + '\n');
    process.exit(1);
});
