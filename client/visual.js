'use strict';
// The frames of one page load as the browser showed them, for its visual progress
// (SpeedIndex, visually complete: quicbed/client/visual.py computes them from these
// frames). Both page-load drivers capture them when a load command asks ("visual": true)
// and return one record beside "paint":
//
//   "visual": {"source": "cdp-screencast", "origin_ms": 1796607178442.5,
//              "viewport": {"width": 780, "height": 437}, "crop": null,
//              "frames": [{"ms": -207.1, "jpeg": "<base64>"}, ...],
//              "final": {"png": "<base64>"}, "started_ms": -210.3, "stopped_ms": 1402.2,
//              "dropped": 0, "error": null}
//
// Every "ms" is after the navigation's time origin (performance.timeOrigin, the clock of
// FCP and LCP), read in the loaded page; "started_ms" and "stopped_ms" bound the capture
// (it starts on the blank page the driver shows before every load, and stops after the
// paint read, so its first frame is the blank start and its last the page as loaded).
// "final" is a screenshot taken after the capture stopped, by another path of the browser
// (CDP Page.captureScreenshot; BiDi browsingContext.captureScreenshot): visual.py checks
// the last frame shows what it shows, so a capture that missed the page's last paints is
// named, not scored.
//
// Chromium (CDP, Chromium 72 too): Page.startScreencast sends a frame each time the
// compositor draws a changed frame, with the time of that frame's swap (seconds since
// the epoch); each frame is acknowledged at once (an unacknowledged frame holds back the
// next). Frames are JPEG at most MAX_SIDE px on their longer side.
// Firefox: no screencast in WebDriver BiDi; the Gecko profiler's "screenshots" feature
// records each composited frame of the window (downscaled by Gecko to at most 350 px) as a
// CompositorScreenshot marker on the parent's main thread, with its time. The profiler
// runs only while a visual load does (features screenshots and nostacksampling: no stack
// samples). Its frames show the whole window, browser toolbar included: "crop" is the
// content area as fractions of the window (gBrowser.selectedBrowser's box), and the
// status panel ("Transferring data from ..."), drawn over the content's bottom-left, is
// hidden by a style sheet of the browser window (not of any page) when the driver starts.

// the longer side of a Chromium frame, px (Firefox's are Gecko's own, at most 350 px)
const MAX_SIDE = 480;
const JPEG_QUALITY = 80;
// Gecko profiler's buffer for a visual load, entries of 8 bytes (the frames' data: URLs
// are in it: about 5 KB each, 60 per second while the page changes)
const GECKO_ENTRIES = 1 << 23;
// its sampling interval, ms: no stacks are sampled; a long interval keeps its thread idle
const GECKO_INTERVAL_MS = 100;

const TIME_ORIGIN = 'performance.timeOrigin';
// the blank page painted before a capture starts: two animation frames of the tab. A
// browser keeps the last page's picture on screen until the next document paints, and
// Firefox's first screenshot after the profiler starts showed the page before the blank
// one (2 of 5 runs of tests/test_visual.py), so the start frame was no blank start
const BLANK_PAINTED = `new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`;

// --- Chromium -----------------------------------------------------------------------
// start the screencast on a tab's CDP client; returns stop() -> the record's frames part
async function chromiumStart(client) {
    await client.Runtime.evaluate({expression: BLANK_PAINTED, awaitPromise: true});
    const frames = [];
    let dropped = 0;
    const off = client.on('Page.screencastFrame', ({data, metadata, sessionId}) => {
        client.Page.screencastFrameAck({sessionId}).catch(() => { dropped += 1; });
        frames.push({epoch_ms: metadata.timestamp * 1000, jpeg: data,
            width: metadata.deviceWidth, height: metadata.deviceHeight});
    });
    const started = Date.now();
    await client.Page.startScreencast({format: 'jpeg', quality: JPEG_QUALITY, maxWidth: MAX_SIDE,
        maxHeight: MAX_SIDE, everyNthFrame: 1});
    return {
        async abort() {
            try { await client.Page.stopScreencast(); } catch (e) { /* gone */ }
            if (typeof off === 'function') off();
        },
        async stop() {
            const stopped = Date.now();
            await client.Page.stopScreencast();
            if (typeof off === 'function') off();
            const r = await client.Runtime.evaluate({expression: TIME_ORIGIN, returnByValue: true});
            const origin = r.result.value;
            let final = null;
            try {
                const shot = await client.Page.captureScreenshot({format: 'png'});
                final = {png: shot.data};
            } catch (e) { final = {error: `screenshot failed: ${e.message || e}`}; }
            const last = frames.length ? frames[frames.length - 1] : null;
            return {
                source: 'cdp-screencast', origin_ms: origin,
                viewport: last ? {width: last.width, height: last.height} : null, crop: null,
                frames: frames.map((f) => ({ms: f.epoch_ms - origin, jpeg: f.jpeg})),
                final, started_ms: started - origin, stopped_ms: stopped - origin, dropped, error: null,
            };
        },
    };
}

// --- Firefox (privileged script in the parent process) -------------------------------
// once per session: hide the status panel over the content area
const GECKO_HIDE_STATUS = `(() => {
  const win = Services.wm.getMostRecentWindow('navigator:browser');
  const css = '#statuspanel { display: none !important; }';
  win.windowUtils.loadSheetUsingURIString('data:text/css,' + encodeURIComponent(css), win.windowUtils.AGENT_SHEET);
  return true;
})()`;

const GECKO_START = `(() => {
  if (Services.profiler.IsActive()) Services.profiler.StopProfiler();
  Services.profiler.StartProfiler(${GECKO_ENTRIES}, ${GECKO_INTERVAL_MS}, ['screenshots', 'nostacksampling'], ['GeckoMain']);
  return String(Date.now());
})()`;

// the CompositorScreenshot markers of the parent's main thread, the content area's box
// and the window's size; the profiler stopped
const GECKO_STOP = `(async () => {
  const win = Services.wm.getMostRecentWindow('navigator:browser');
  const box = win.gBrowser.selectedBrowser.getBoundingClientRect();
  const shown = win.gBrowser.selectedBrowser.currentURI.spec;
  const profile = await Services.profiler.getProfileDataAsync();
  Services.profiler.StopProfiler();
  const frames = [];
  let width = null, height = null;
  for (const t of profile.threads) {
    const strings = t.stringTable || t.stringArray || [];
    const m = t.markers;
    if (!m || !m.schema) continue;
    for (const row of m.data) {
      if (strings[row[m.schema.name]] !== 'CompositorScreenshot') continue;
      const d = row[m.schema.data] || {};
      const url = strings[d.url] || '';
      if (!url.startsWith('data:image/jpeg;base64,')) continue;
      width = d.windowWidth; height = d.windowHeight;
      frames.push({epoch_ms: profile.meta.startTime + row[m.schema.startTime],
        jpeg: url.slice('data:image/jpeg;base64,'.length)});
    }
  }
  frames.sort((a, b) => a.epoch_ms - b.epoch_ms);
  return JSON.stringify({frames, width, height, shown,
    box: {x: box.x, y: box.y, width: box.width, height: box.height},
    inner: {width: win.innerWidth, height: win.innerHeight}});
})()`;

// evaluate(context, expression) runs script (client/firefox/load.js); chrome is the
// parent's context, tab the loaded page's (showing the blank page when the capture
// starts); screenshot(tab) -> base64 PNG of its viewport
async function geckoStart(evaluate, chrome, tab) {
    await evaluate(tab, BLANK_PAINTED);
    const started = Number(await evaluate(chrome, GECKO_START));
    return {
        async abort() {
            try { await evaluate(chrome, 'Services.profiler.StopProfiler(), true'); } catch (e) { /* gone */ }
        },
        async stop(tab, screenshot) {
            const stopped = Date.now();
            const got = JSON.parse(await evaluate(chrome, GECKO_STOP));
            const origin = Number(await evaluate(tab, `String(${TIME_ORIGIN})`));
            let final = null;
            try { final = {png: await screenshot(tab)}; } catch (e) { final = {error: `screenshot failed: ${e.message || e}`}; }
            const {box, inner} = got;
            return {
                source: 'gecko-profiler-screenshots', origin_ms: origin,
                viewport: {width: Math.round(box.width), height: Math.round(box.height)},
                crop: inner.width > 0 && inner.height > 0 ? {x: box.x / inner.width, y: box.y / inner.height,
                    width: box.width / inner.width, height: box.height / inner.height} : null,
                shown: got.shown,
                frames: got.frames.map((f) => ({ms: f.epoch_ms - origin, jpeg: f.jpeg})),
                final, started_ms: started - origin, stopped_ms: stopped - origin, dropped: 0, error: null,
            };
        },
    };
}

// a started capture's record (stop's arguments are the browser's: geckoStart's stop takes
// the tab and a screenshot function); a failed capture is the load's "visual": {error},
// never a load failure. A load that fails on its own abort()s its capture instead.
async function stopped(capture, ...args) {
    try {
        return await capture.stop(...args);
    } catch (e) {
        return {error: `frame capture failed: ${e.message || e}`};
    }
}

module.exports = {chromiumStart, geckoStart, stopped, GECKO_HIDE_STATUS, MAX_SIDE};
