'use strict';
// quicbed's page-load driver. Talks CDP to one running Chromium and loads pages
// on request, one JSON command per stdin line, one JSON result per stdout line:
//
//   {"cmd": "load", "url": "https://quicbed.test/5kb/", "fresh_context": false, "timeout_ms": 60000}
//   -> {"ok": true, "error": null, "har": {...}, "nav": {...}, "context": "...", "started_at": ms}
//
// fresh_context=false (0-RTT mode): every load runs in ONE tab of one browser
// context, kept for the whole arm, so Chromium keeps the server's session ticket
// and QUIC state; before each load the HTTP cache, host cache and predictor are
// cleared and all connections closed (chrome.benchmarking, --enable-net-benchmarking).
// fresh_context=true (1-RTT mode): a new browser context per load, disposed after.
// The HAR is built from the CDP events with chrome-har-capturer's fromLog.

const readline = require('readline');
const CDP = require('chrome-remote-interface');
const CHC = require('chrome-har-capturer');

const port = parseInt(process.argv[2], 10);
// after onLoad and every request's loadingFinished: a margin for the last CDP events
// (it was 100 ms; 20 ms left every HAR complete, and it runs after every load)
const SETTLE_MS = 20;

const CLEAR = `(async () => {
  const b = chrome.benchmarking;
  await b.clearCache();
  await b.clearHostResolverCache();
  await b.clearPredictorCache();
  await b.closeConnections();
  return true;
})()`;

const NAV = `JSON.stringify(performance.getEntriesByType('navigation')[0] || null)`;

let browser;      // browser-level CDP client
let kept = null;  // {client, targetId, contextId} of the 0-RTT tab

async function openTab(contextId) {
    const params = {url: 'about:blank'};
    if (contextId) params.browserContextId = contextId;
    const {targetId} = await browser.Target.createTarget(params);
    const client = await CDP({port, target: targetId});
    await client.Network.enable();
    await client.Page.enable();
    await client.Network.setCacheDisabled({cacheDisabled: true});
    return {client, targetId, contextId: contextId || null};
}

async function closeTab(tab) {
    try { await tab.client.close(); } catch (e) { /* already gone */ }
    try { await browser.Target.closeTarget({targetId: tab.targetId}); } catch (e) { /* gone */ }
    if (tab.contextId) {
        try { await browser.Target.disposeBrowserContext({browserContextId: tab.contextId}); } catch (e) { /* gone */ }
    }
}

function withTimeout(promise, ms, what) {
    let timer;
    const t = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms); });
    return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

async function load(cmd) {
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
    const events = [];
    const pending = new Set();
    const record = (method) => (params) => {
        events.push({method, params});
        if (method === 'Network.requestWillBeSent') pending.add(params.requestId);
        if (method === 'Network.loadingFinished' || method === 'Network.loadingFailed') pending.delete(params.requestId);
    };
    const off = [];
    try {
        // a clean slate: no cached body, no resolver entry, no idle connection
        await client.Page.navigate({url: 'about:blank'});
        const cleared = await client.Runtime.evaluate({expression: CLEAR, awaitPromise: true, returnByValue: true});
        if (cleared.exceptionDetails) throw new Error('chrome.benchmarking unavailable (--enable-net-benchmarking?)');
        await client.Network.clearBrowserCache();
        for (const m of ['Network.requestWillBeSent', 'Network.requestWillBeSentExtraInfo', 'Network.responseReceived',
            'Network.responseReceivedExtraInfo', 'Network.dataReceived', 'Network.loadingFinished',
            'Network.loadingFailed', 'Page.domContentEventFired', 'Page.loadEventFired']) {
            off.push(client.on(m, record(m)));
        }
        const loaded = new Promise((resolve) => client.once('Page.loadEventFired', resolve));
        const nav = await client.Page.navigate({url: cmd.url});
        if (nav.errorText) throw new Error(`navigation failed: ${nav.errorText}`);
        await withTimeout(loaded, cmd.timeout_ms || 60000, 'page load');
        const until = Date.now() + 1000;
        while (pending.size > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
        await new Promise((r) => setTimeout(r, SETTLE_MS));
        const navTiming = await client.Runtime.evaluate({expression: NAV, returnByValue: true});
        const har = await CHC.fromLog(cmd.url, events);
        return {ok: true, error: null, har, nav: JSON.parse(navTiming.result.value || 'null'),
            context: tab.contextId || 'default', target: tab.targetId, started_at};
    } catch (e) {
        let har = null;
        try { har = await CHC.fromLog(cmd.url, events); } catch (e2) { /* incomplete log */ }
        return {ok: false, error: String(e.message || e), har, nav: null,
            context: tab.contextId || 'default', target: tab.targetId, started_at};
    } finally {
        for (const o of off) { if (typeof o === 'function') o(); }
        if (cmd.fresh_context) await closeTab(tab);
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
