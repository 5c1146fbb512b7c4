import { createPublicKey, generateKeyPair, verify as rsaVerify } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startSidecar } from '../app.js';
import { loadConfig } from '../config/load.js';
import { signingString } from '../signing/signing-string.js';
import { startSimulator } from '../simulator/index.js';
import { EXIT } from './command.js';
const USAGE = `Usage: signing-sidecar demo

Runs the whole request path on this machine and cleans up: makes a throwaway key pair, starts the gateway
simulator (HTTPS, self-made CA) and the sidecar, sends a plain-JSON deposit and withdrawal through the sidecar
as an internal service would, completes the deposit and shows the signed postback arriving. Exits 0 on success.
`;
const USERNAME = 'demo-vendor@example.com';
const POSTBACK_WAIT_MS = 15_000;
export const demo = async (argv, io) => {
    if (argv.includes('--help') || argv.includes('-h')) {
        io.stdout.write(USAGE);
        return EXIT.ok;
    }
    if (argv.length > 0) {
        io.stderr.write(`signing-sidecar demo: unexpected argument ${argv[0]}\n${USAGE}`);
        return EXIT.usage;
    }
    const say = (line) => io.stdout.write(`${line}\n`);
    const dir = await mkdtemp(join(tmpdir(), 'signing-sidecar-demo-'));
    const cleanup = [() => rm(dir, { recursive: true, force: true })];
    try {
        return await run(dir, say, cleanup);
    }
    finally {
        for (const step of cleanup.reverse())
            await step().catch(() => undefined);
    }
};
async function run(dir, say, cleanup) {
    say('1. making a throwaway RSA-2048 key pair');
    const keys = await makeKeyPair(dir);
    const webhook = await startWebhook();
    cleanup.push(() => closeServer(webhook.server));
    say('2. starting the gateway simulator (HTTPS, signed postbacks on)');
    const sim = await startSimulator({
        tls: true,
        accounts: [{ username: USERNAME, password: keys.password, publicKeyPem: keys.publicKeyPem, webhookUrl: webhook.url, signedPostbacks: true }],
    });
    cleanup.push(() => sim.close());
    const sidecar = await startDemoSidecar(dir, sim);
    cleanup.push(() => sidecar.shutdown('demo finished'));
    say(`3. sidecar ${sidecar.proxyUrl} -> gateway ${sim.baseUrl}, token obtained`);
    const deposit = await postJson(sidecar, '/api/v2/transaction/init', {
        amount: '100.50', currency: 'USD', gateway: 'card', user_id: 'u1', invoice_no: `inv-${Date.now()}`,
    });
    say(`4. deposit:    HTTP ${deposit.status} ${JSON.stringify(deposit.body)}`);
    const withdrawal = await postJson(sidecar, '/api/v2/transfer-out/init', {
        amount: '25.00', currency: 'USD', user_id: 'u1', invoice_no: `out-${Date.now()}`,
    });
    say(`5. withdrawal: HTTP ${withdrawal.status} ${JSON.stringify(withdrawal.body)}`);
    const link = deposit.body.transaction_link;
    const id = deposit.body.transaction_id;
    if (deposit.status >= 300 || typeof link !== 'string' || typeof id !== 'string' || withdrawal.status >= 300) {
        say('demo failed: the gateway did not accept the requests');
        return EXIT.failed;
    }
    say(`   customer would be redirected to: ${link}`);
    await sim.complete(id, 'SUCCESS');
    say(`6. completed ${id} as SUCCESS; waiting for the postback`);
    const postback = await webhook.next(POSTBACK_WAIT_MS, sim.postbackPublicKeyPem);
    say(`7. postback received: ${JSON.stringify(postback.payload)} (signature ${postback.verified ? 'verified' : 'NOT verified'})`);
    if (!postback.verified || postback.payload.status !== 'SUCCESS')
        return EXIT.failed;
    say('demo complete: cleaning up');
    return EXIT.ok;
}
async function makeKeyPair(dir) {
    const { privateKey, publicKey } = await promisify(generateKeyPair)('rsa', {
        modulusLength: 2048,
        publicKeyEncoding: { type: 'spki', format: 'pem' },
        privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    });
    await writeFile(join(dir, 'private-key.pem'), privateKey, { mode: 0o600 });
    const password = `demo-${Math.random().toString(36).slice(2)}`;
    await writeFile(join(dir, 'password'), password, { mode: 0o600 });
    return { publicKeyPem: publicKey, password };
}
async function startDemoSidecar(dir, sim) {
    const caFile = join(dir, 'gateway-ca.pem');
    await writeFile(caFile, sim.caPem ?? '');
    const config = loadConfig({
        SIDECAR_BASE_URL: sim.baseUrl,
        SIDECAR_ENVIRONMENT: 'staging',
        SIDECAR_USERNAME: USERNAME,
        SIDECAR_PASSWORD_FILE: join(dir, 'password'),
        SIDECAR_PRIVATE_KEY_FILE: join(dir, 'private-key.pem'),
        SIDECAR_UPSTREAM_CA_FILE: caFile,
        SIDECAR_LISTEN_PORT: '0',
        SIDECAR_ADMIN_HOST: '127.0.0.1',
        SIDECAR_ADMIN_PORT: '0',
        SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0',
        SIDECAR_LOG_LEVEL: 'silent',
    });
    const sidecar = await startSidecar(config);
    const until = Date.now() + 10_000;
    while (!sidecar.isReady()) {
        if (Date.now() > until)
            throw new Error('the sidecar obtained no token from the simulator');
        await new Promise((r) => setTimeout(r, 20));
    }
    return sidecar;
}
async function postJson(sidecar, path, payload) {
    const response = await fetch(`${sidecar.proxyUrl}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
    });
    return { status: response.status, body: (await response.json()) };
}
/** A vendor's webhook: answers 200 and checks the postback signature with the simulator's public key. */
async function startWebhook() {
    const waiting = [];
    const server = createServer((req, res) => {
        let body = '';
        req.setEncoding('utf8');
        req.on('data', (chunk) => (body += chunk));
        req.on('end', () => {
            res.writeHead(200).end();
            waiting.shift()?.({ headers: req.headers, body });
        });
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${server.address().port}/postbacks`;
    const next = (timeoutMs, publicKeyPem) => new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no postback arrived in time')), timeoutMs);
        waiting.push(({ headers, body }) => {
            clearTimeout(timer);
            resolve(readPostback(url, headers, body, publicKeyPem));
        });
    });
    return { server, url, next };
}
function readPostback(url, headers, body, publicKeyPem) {
    const data = JSON.parse(body).data;
    const payload = JSON.parse(Buffer.from(data, 'base64').toString('utf8'));
    const header = (name) => String(headers[name] ?? '');
    const text = signingString({ method: 'POST', fullUrl: url, timestamp: header('x-timestamp'), nonce: header('x-nonce'), data });
    const verified = rsaVerify('sha256', Buffer.from(text), createPublicKey(publicKeyPem), Buffer.from(header('x-signature'), 'base64'));
    return { payload, verified };
}
function closeServer(server) {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(() => resolve()));
}
