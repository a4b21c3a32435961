'use strict';
// quicbed's page-load driver. Talks CDP to one running Chromium and loads pages
// on request, one JSON command per stdin line, one JSON result per stdout line:
//
//   {"cmd": "load", "url": "https://quicbed.test/5kb/", "fresh_context": false, "timeout_ms": 60000,
//    "content": false, "visual": false}
//   -> {"ok": true, "error": null, "har": {...}, "nav": {...}, "paint": {...}, "visual": {...}, "context": "...",
//       "started_at": ms, "frames": {"attached": 1}, "clearing": {"cache": "chrome.benchmarking.clearCache", ...}}
//
//   node load.js PORT [--fallbacks]
//
// fresh_context=false (0-RTT mode): every load runs in ONE tab of one browser
// context, kept for the whole arm, so Chromium keeps the server's session ticket
// and QUIC state; before each load the HTTP cache, host cache and predictor are
// cleared and all connections closed (chrome.benchmarking, --enable-net-benchmarking).
// fresh_context=true (1-RTT mode): a new browser context per load, disposed when the
// next command arrives, not at the end of its load: disposing it closes its
// connections, and quicbed asks the server's kernel what the load's TCP connections
// ran (their congestion control) after the load returns. Disposed at once, an h2
// load had nothing left to ask about and was judged invalid.
// The HAR is built from the CDP events with chrome-har-capturer's fromLog. "paint" is
// the page's first contentful paint and largest contentful paint, read in the page
// after the load (client/paint.js says what and when; Chromium 72 has no LCP: null).
// "visual" (only when the command asks) is the load's frames from the blank page before
// it to the paint read after it (client/visual.js says how and on which clock).
//
// "clearing" says, per step, what cleared it before the load: the chrome.benchmarking
// function, a fallback (below), or null with the reason in "clearing_skipped".
// Without --fallbacks (the current Chromium) every chrome.benchmarking step is
// required: a missing one fails the load, as it always did. With --fallbacks
// (Chromium 72's headless shell, quicbed's gQUIC client, which has no chrome.* at
// all: chrome.benchmarking is Chrome's, not the headless shell's):
//   cache        not cleared but bypassed: every tab has Network.setCacheDisabled, so
//                no request is answered from the HTTP cache (quicbed's servers also
//                send no-store). Network.clearBrowserCache is NOT run: in Chromium 72
//                it also drops the cached gQUIC server configs and source-address
//                tokens, so no gQUIC connection after it could be 0-RTT (seen here:
//                with it every connection took two REJs, without it the next was 0-RTT)
//   host_cache   skipped: no way to reach it; the test host is mapped to an IP
//                literal by --host-resolver-rules, which never goes through it
//   predictor    skipped: the headless shell has no predictor (Chrome's
//                chrome/browser/net is not in it), so there is nothing to clear
//   connections  the browser's own sockets (its process tree's, non-loopback) are
//                destroyed by the kernel (ss -K; CONFIG_INET_DIAG_DESTROY, and for UDP
//                CONFIG_INET_UDP_DIAG), then awaited until Chromium dropped them: an abort,
//                not the graceful close closeConnections does; the TLS session
//                cache and QUIC server configs stay, as with closeConnections. If no
//                socket can be destroyed the load fails naming why (a load on a
//                reused connection must never look like a measured one).

const readline = require('readline');
const fs = require('fs');
const {execFileSync} = require('child_process');
const CDP = require('chrome-remote-interface');
const CHC = require('chrome-har-capturer');
const {PAINT} = require('./paint');
const {chromiumStart, stopped} = require('./visual');

const port = parseInt(process.argv[2], 10);
const FALLBACKS = process.argv.slice(3).includes('--fallbacks');
// after onLoad and every request's loadingFinished: a margin for the last CDP events
// (it was 100 ms; 20 ms left every HAR complete, and it runs after every load)
const SETTLE_MS = 20;
// how long Chromium gets to drop the destroyed sockets (it closes them on the error)
const DROP_WAIT_MS = 1000;

// clearing steps, in the order they run: [step, chrome.benchmarking function]
const STEPS = [['cache', 'clearCache'], ['host_cache', 'clearHostResolverCache'],
    ['predictor', 'clearPredictorCache'], ['connections', 'closeConnections']];

// runs every chrome.benchmarking function there is (awaited: a synchronous one
// returns undefined, which await takes as well) and says which ran
const CLEAR = `(async () => {
  const b = (typeof chrome === 'object' && chrome && chrome.benchmarking) || {};
  const ran = [];
  for (const fn of ${JSON.stringify(STEPS.map((s) => s[1]))}) {
    if (typeof b[fn] === 'function') { await b[fn](); ran.push(fn); }
  }
  return ran;
})()`;

const SKIPPED = {
    host_cache: 'no chrome.benchmarking in this browser; the test host is mapped to an IP literal ' +
        '(--host-resolver-rules), which is resolved without the host cache',
    predictor: 'no chrome.benchmarking in this browser; its headless shell has no predictor',
};

const NAV = `JSON.stringify(performance.getEntriesByType('navigation')[0] || null)`;

// the paint metrics (client/paint.js); a failed read is the load's "paint": {error},
// never a load failure nor a number
async function readPaint(client) {
    const r = await client.Runtime.evaluate({expression: PAINT, awaitPromise: true, returnByValue: true});
    if (r.exceptionDetails) {
        const ex = r.exceptionDetails;
        return {error: `paint read failed: ${(ex.exception && ex.exception.description) || ex.text}`};
    }
    return JSON.parse(r.result.value);
}

// --- closing the browser's connections from outside (the fallback) --------------------
function sh(argv) {
    return execFileSync(argv[0], argv.slice(1), {encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe']});
}

let browserPids = null;  // the browser's process tree, found once

function findBrowserPids() {
    // the process listening on the DevTools port is the browser; its tree holds the
    // network stack (in-process or a network service child)
    const out = sh(['ss', '-Hltnp', `sport = :${port}`]);
    const m = out.match(/pid=(\d+)/);
    if (!m) throw new Error(`no process listens on the DevTools port ${port} (ss -ltnp)`);
    const root = parseInt(m[1], 10);
    const children = new Map();
    for (const d of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(d)) continue;
        let stat;
        try { stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8'); } catch (e) { continue; }
        const ppid = parseInt(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1], 10);
        if (!children.has(ppid)) children.set(ppid, []);
        children.get(ppid).push(parseInt(d, 10));
    }
    const pids = new Set([root]);
    const todo = [root];
    while (todo.length) for (const c of children.get(todo.pop()) || []) { if (!pids.has(c)) { pids.add(c); todo.push(c); } }
    return pids;
}

function splitHostPort(s) {
    const i = s.lastIndexOf(':');
    return [s.slice(0, i).replace(/^\[|\]$/g, ''), s.slice(i + 1)];
}

function loopbackOrUnset(addr) {
    return addr === '*' || addr.startsWith('127.') || addr === '::1' || addr === '0.0.0.0' || addr === '::' ||
        addr.startsWith('::ffff:127.');
}

// the browser tree's connected TCP and UDP sockets to anything but loopback
function browserSockets() {
    // refresh the tree each time: a network service or renderer may have started since
    browserPids = findBrowserPids();
    const out = sh(['ss', '-Htunape']);
    const socks = [];
    for (const line of out.split('\n')) {
        const f = line.trim().split(/\s+/);
        if (f.length < 6 || f[1] === 'LISTEN' || f[1] === 'UNCONN') continue;
        const pids = [...line.matchAll(/pid=(\d+)/g)].map((x) => parseInt(x[1], 10));
        if (!pids.some((p) => browserPids.has(p))) continue;
        const [laddr, lport] = splitHostPort(f[4]);
        const [paddr, pport] = splitHostPort(f[5]);
        if (loopbackOrUnset(paddr) || pport === '*') continue;
        const ino = (line.match(/ino:(\d+)/) || [])[1];
        socks.push({proto: f[0], state: f[1], local: `${laddr}:${lport}`, peer: `${paddr}:${pport}`,
            lport, pport, ino, pids: pids.filter((p) => browserPids.has(p))});
    }
    return socks;
}

function heldInodes(pids) {
    const held = new Set();
    for (const pid of pids) {
        let fds = [];
        try { fds = fs.readdirSync(`/proc/${pid}/fd`); } catch (e) { continue; }
        for (const fd of fds) {
            try {
                const m = fs.readlinkSync(`/proc/${pid}/fd/${fd}`).match(/^socket:\[(\d+)\]$/);
                if (m) held.add(m[1]);
            } catch (e) { /* closed meanwhile */ }
        }
    }
    return held;
}

async function destroyConnections() {
    const socks = browserSockets();
    const errors = [];
    for (const s of socks) {
        const flag = s.proto === 'udp' ? '-u' : '-t';
        try {
            sh(['ss', '-HK', flag, 'state', 'all', `( sport = :${s.lport} and dport = :${s.pport} )`]);
        } catch (e) {
            errors.push(String(e.stderr || e.message).trim().split('\n')[0]);
        }
    }
    const left = browserSockets().filter((s) => socks.some((k) => k.ino === s.ino));
    if (left.length) {
        throw new Error(`could not close the browser's connections before the load: ss -K left ` +
            `${left.map((s) => `${s.proto} ${s.local} -> ${s.peer}`).join(', ')} (kernel without ` +
            `CONFIG_INET_DIAG_DESTROY or CONFIG_INET_UDP_DIAG?${errors.length ? ` ss: ${errors[0]}` : ''})`);
    }
    // wait until Chromium has seen the errors and dropped the sockets, so the load
    // does not find a dead connection in its pool
    const until = Date.now() + DROP_WAIT_MS;
    const pids = [...browserPids];
    const inos = new Set(socks.map((s) => s.ino));
    let held = [...heldInodes(pids)].filter((i) => inos.has(i));
    while (held.length && Date.now() < until) {
        await new Promise((r) => setTimeout(r, 5));
        held = [...heldInodes(pids)].filter((i) => inos.has(i));
    }
    return {destroyed: socks.map((s) => `${s.proto} ${s.local} -> ${s.peer}`), still_held: held.length};
}

async function clearBeforeLoad(client) {
    const cleared = await client.Runtime.evaluate({expression: CLEAR, awaitPromise: true, returnByValue: true});
    if (cleared.exceptionDetails) throw new Error(`clearing failed: ${cleared.exceptionDetails.text}`);
    const ran = cleared.result.value || [];
    const clearing = {};
    const skipped = {};
    let closed = null;
    for (const [step, fn] of STEPS) {
        if (ran.includes(fn)) {
            clearing[step] = `chrome.benchmarking.${fn}`;
            continue;
        }
        if (!FALLBACKS) throw new Error(`chrome.benchmarking.${fn} unavailable (--enable-net-benchmarking?)`);
        if (step === 'cache') {
            clearing[step] = 'Network.setCacheDisabled (bypassed, not cleared)';
            skipped[step] = 'Network.clearBrowserCache not run: in Chromium 72 it also drops the ' +
                'cached gQUIC server configs, so no later gQUIC connection could be 0-RTT';
        } else if (step === 'connections') {
            closed = await destroyConnections();
            clearing[step] = 'ss -K (the browser\'s sockets destroyed by the kernel)';
        } else {
            clearing[step] = null;
            skipped[step] = SKIPPED[step];
        }
    }
    if (!FALLBACKS) await client.Network.clearBrowserCache();
    return {clearing, skipped, closed};
}

let browser;      // browser-level CDP client
let kept = null;  // {client, targetId, contextId} of the 0-RTT tab
let spent = null; // the last 1-RTT load's tab, disposed when the next command arrives

// A cross-site iframe runs in a renderer of its own (site isolation): a target of its
// own, whose network events the page's session never sees. Each is attached as it
// starts (paused until its network events are on), so its requests are in the HAR and
// judged like the page's; frames inside it likewise. Where the browser cannot attach
// (Chromium 72 has no flat sessions), the tab says why in "frames".
const AUTO_ATTACH = {autoAttach: true, waitForDebuggerOnStart: true, flatten: true};

function attachFrames(client, tab) {
    client.on('Target.attachedToTarget', async ({sessionId, targetInfo}) => {
        try {
            if (targetInfo.type === 'iframe') {
                await client.send('Network.enable', {}, sessionId);
                await client.send('Network.setCacheDisabled', {cacheDisabled: true}, sessionId);
                await client.send('Target.setAutoAttach', AUTO_ATTACH, sessionId);
                tab.frames.attached += 1;
            }
        } catch (e) { /* the frame went away while it was attached */ }
        try { await client.send('Runtime.runIfWaitingForDebugger', {}, sessionId); } catch (e) { /* gone */ }
    });
}

async function openTab(contextId) {
    const params = {url: 'about:blank'};
    if (contextId) params.browserContextId = contextId;
    const {targetId} = await browser.Target.createTarget(params);
    const client = await CDP({port, target: targetId});
    const tab = {client, targetId, contextId: contextId || null, frames: {attached: 0}};
    attachFrames(client, tab);
    await client.Network.enable();
    await client.Page.enable();
    await client.Network.setCacheDisabled({cacheDisabled: true});
    if (FALLBACKS) {  // Chromium 72: a paused frame it cannot resume would hang the load
        tab.frames.not_attached = 'not with --fallbacks (Chromium 72 has no flat sessions)';
    } else {
        try {
            await client.Target.setAutoAttach(AUTO_ATTACH);
        } catch (e) {
            tab.frames.not_attached = `Target.setAutoAttach: ${e.message || e}`;
        }
    }
    return tab;
}

async function closeTab(tab) {
    try { await tab.client.close(); } catch (e) { /* already gone */ }
    try { await browser.Target.closeTarget({targetId: tab.targetId}); } catch (e) { /* gone */ }
    if (tab.contextId) {
        try { await browser.Target.disposeBrowserContext({browserContextId: tab.contextId}); } catch (e) { /* gone */ }
    }
}

// "content": true keeps every response's body in the HAR (HAR 1.2 content.text, base64
// where binary): what `quicbed pages import` needs to replay a load. Read after the
// load, from the session each request was of, so it costs the measured load nothing; a
// body the browser no longer holds is left out (content.text absent). A cross-site
// iframe's document is requested in its parent's session but its body is held by the
// frame's own: a body its request's session does not have is asked of every other.
async function fetchBodies(client, events, sessions) {
    const done = events.filter((e) => e.method === 'Network.loadingFinished').map((e) => e.params.requestId);
    const all = [...new Set(sessions.values())];
    for (const requestId of done) {
        const params = {requestId};
        const own = sessions.get(requestId);
        for (const sessionId of [own, ...all.filter((s) => s !== own)]) {
            try {
                const b = await client.send('Network.getResponseBody', {requestId}, sessionId);
                Object.assign(params, {body: b.body, base64Encoded: b.base64Encoded});
                break;
            } catch (e) { /* not kept by this session */ }
        }
        events.push({method: 'Network.getResponseBody', params});
    }
}

function withTimeout(promise, ms, what) {
    let timer;
    const t = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms); });
    return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

// the clearing record of a load; the fallback's details only when it ran
function report(cleared) {
    const out = {clearing: cleared.clearing};
    if (Object.keys(cleared.skipped).length) out.clearing_skipped = cleared.skipped;
    if (cleared.closed) out.connections_destroyed = cleared.closed;
    return out;
}

async function load(cmd) {
    if (spent) {
        await closeTab(spent);
        spent = null;
    }
    const started_at = Date.now();
    let tab;
    if (cmd.fresh_context) {
        const {browserContextId} = await browser.Target.createBrowserContext({disposeOnDetach: true});
        tab = await openTab(browserContextId);
    } else {
        if (!kept) kept = await openTab(null);
        tab = kept;
    }
    const {client} = tab;
    const framesBefore = tab.frames.attached;
    const frames = () => ({attached: tab.frames.attached - framesBefore,
        ...(tab.frames.not_attached ? {not_attached: tab.frames.not_attached} : {})});
    const events = [];
    const pending = new Set();
    const sessions = new Map();  // requestId -> the session (page or iframe) it is of
    const record = (method) => (params, sessionId) => {
        events.push({method, params});
        if (method === 'Network.requestWillBeSent') {
            pending.add(params.requestId);
            sessions.set(params.requestId, sessionId);
        }
        if (method === 'Network.loadingFinished' || method === 'Network.loadingFailed') pending.delete(params.requestId);
    };
    const off = [];
    let cleared = {clearing: null, skipped: {}, closed: null};
    let capture = null;
    try {
        // a clean slate: no cached body, no resolver entry, no idle connection
        await client.Page.navigate({url: 'about:blank'});
        cleared = await clearBeforeLoad(client);
        for (const m of ['Network.requestWillBeSent', 'Network.requestWillBeSentExtraInfo', 'Network.responseReceived',
            'Network.responseReceivedExtraInfo', 'Network.dataReceived', 'Network.loadingFinished',
            'Network.loadingFailed', 'Page.domContentEventFired', 'Page.loadEventFired']) {
            off.push(client.on(m, record(m)));
        }
        const loaded = new Promise((resolve) => client.once('Page.loadEventFired', resolve));
        if (cmd.visual) capture = await chromiumStart(client);
        const nav = await client.Page.navigate({url: cmd.url});
        if (nav.errorText) throw new Error(`navigation failed: ${nav.errorText}`);
        await withTimeout(loaded, cmd.timeout_ms || 60000, 'page load');
        const until = Date.now() + 1000;
        while (pending.size > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
        await new Promise((r) => setTimeout(r, SETTLE_MS));
        const navTiming = await client.Runtime.evaluate({expression: NAV, returnByValue: true});
        if (cmd.content) await fetchBodies(client, events, sessions);
        const har = await CHC.fromLog(cmd.url, events, {content: !!cmd.content});
        // after the HAR: a request the page makes while its paint is read is not the load's
        const paint = await readPaint(client);
        const visual = capture ? await stopped(capture) : undefined;
        capture = null;
        return {ok: true, error: null, har, nav: JSON.parse(navTiming.result.value || 'null'), paint, visual,
            context: tab.contextId || 'default', target: tab.targetId, started_at, frames: frames(), ...report(cleared)};
    } catch (e) {
        let har = null;
        try { har = await CHC.fromLog(cmd.url, events); } catch (e2) { /* incomplete log */ }
        return {ok: false, error: String(e.message || e), har, nav: null, paint: null,
            context: tab.contextId || 'default', target: tab.targetId, started_at, frames: frames(), ...report(cleared)};
    } finally {
        if (capture) await capture.abort();
        for (const o of off) { if (typeof o === 'function') o(); }
        if (cmd.fresh_context) spent = tab;
    }
}

async function main() {
    const version = await CDP.Version({port});
    browser = await CDP({port, target: version.webSocketDebuggerUrl});
    process.stdout.write(JSON.stringify({ready: true, browser: version.Browser, protocol: version['Protocol-Version']}) + '\n');
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
    if (kept) await closeTab(kept);
    await browser.close();
    // An open CDP socket would keep the event loop alive: quit means exit now
    // (it cost 5 s per browser, the stop timeout, at the end of every cell).
    process.exit(0);
}

main().catch((e) => {
    process.stdout.write(JSON.stringify({ready: false, error: String(e.message || e)}) + '\n');
    process.exit(1);
});
