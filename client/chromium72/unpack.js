'use strict';
// Unpacks the headless Chromium 72.0.3617.0 that chrome-aws-lambda 1.11.2 ships as one
// brotli file (bin/chromium-72.0.3617.0.br) into DEST/chromium, checking both files
// against pinned SHA-256 digests. roles/chromium_client_gquic runs it after `npm ci`
// in this folder; by hand (the digests are the role's defaults):
//
//   node unpack.js --br node_modules/chrome-aws-lambda/bin/chromium-72.0.3617.0.br \
//        --br-sha256 HEX --dest /opt/quicbed/chromium-72.0.3617.0 --sha256 HEX
//
// Idempotent: if DEST/chromium is there with the pinned digest nothing is touched.
// Otherwise the .br is checked, inflated with Node's own zlib (brotli; Node >= 10.16)
// into a temporary file next to the target, hashed on the way, and renamed into place
// only if the digest matches: a wrong or half-written binary is never left as
// DEST/chromium. Prints one JSON line: {"changed": bool, "binary": ..., "sha256": ...}.

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const {pipeline} = require('stream');

function fail(msg) {
    process.stderr.write(`unpack.js: ${msg}\n`);
    process.exit(1);
}

function args(argv) {
    const out = {};
    for (let i = 0; i < argv.length; i += 2) {
        const k = argv[i];
        if (!['--br', '--br-sha256', '--dest', '--sha256'].includes(k) || argv[i + 1] === undefined) {
            fail(`bad argument ${JSON.stringify(k)} (--br FILE --br-sha256 HEX --dest DIR --sha256 HEX)`);
        }
        out[k.slice(2)] = argv[i + 1];
    }
    for (const k of ['br', 'br-sha256', 'dest', 'sha256']) {
        if (!out[k]) fail(`--${k} is required`);
    }
    for (const k of ['br-sha256', 'sha256']) {
        if (!/^[0-9a-f]{64}$/.test(out[k])) fail(`--${k} ${JSON.stringify(out[k])} is not a SHA-256 in hex`);
    }
    return out;
}

function sha256File(file) {
    return new Promise((resolve, reject) => {
        const h = crypto.createHash('sha256');
        fs.createReadStream(file).on('error', reject).on('data', (d) => h.update(d))
            .on('end', () => resolve(h.digest('hex')));
    });
}

async function main() {
    const a = args(process.argv.slice(2));
    if (typeof zlib.createBrotliDecompress !== 'function') {
        fail(`Node ${process.version} has no brotli in zlib (Node >= 10.16 has)`);
    }
    const binary = path.join(a.dest, 'chromium');
    if (fs.existsSync(binary)) {
        const have = await sha256File(binary);
        if (have === a.sha256) {
            process.stdout.write(JSON.stringify({changed: false, binary, sha256: have}) + '\n');
            return;
        }
        process.stderr.write(`unpack.js: ${binary} is ${have}, not the pinned ${a.sha256}: replacing it\n`);
    }
    if (!fs.existsSync(a.br)) fail(`${a.br} is not there (npm ci in client/chromium72 first)`);
    const brHave = await sha256File(a.br);
    if (brHave !== a['br-sha256']) fail(`${a.br} is ${brHave}, not the pinned ${a['br-sha256']}`);
    fs.mkdirSync(a.dest, {recursive: true, mode: 0o755});
    const tmp = path.join(a.dest, `.chromium.partial-${process.pid}`);
    const h = crypto.createHash('sha256');
    const inflate = zlib.createBrotliDecompress();
    inflate.on('data', (d) => h.update(d));
    try {
        await new Promise((resolve, reject) => pipeline(fs.createReadStream(a.br), inflate,
            fs.createWriteStream(tmp, {mode: 0o700}), (e) => (e ? reject(e) : resolve())));
    } catch (e) {
        try { fs.unlinkSync(tmp); } catch (e2) { /* not made */ }
        fail(`inflating ${a.br}: ${e.message}`);
    }
    const have = h.digest('hex');
    if (have !== a.sha256) {
        fs.unlinkSync(tmp);
        fail(`${a.br} inflates to ${have}, not the pinned ${a.sha256}`);
    }
    const fd = fs.openSync(tmp, 'r');
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.chmodSync(tmp, 0o755);
    fs.renameSync(tmp, binary);
    process.stdout.write(JSON.stringify({changed: true, binary, sha256: have}) + '\n');
}

main().catch((e) => fail(e.stack || String(e)));
