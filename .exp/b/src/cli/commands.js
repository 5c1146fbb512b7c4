import { check } from './check.js';
import { demo } from './demo.js';
import { keygen } from './keygen.js';
import { serve } from './serve.js';
import { sign } from './sign.js';
import { simulate } from './simulate.js';
import { verify } from './verify.js';
/** Every subcommand, by name. */
export const COMMANDS = {
    serve: { run: serve, summary: 'run the signing proxy (configured by SIDECAR_* settings)' },
    simulate: { run: simulate, summary: 'run the strict gateway simulator (local development, CI)' },
    demo: { run: demo, summary: 'run a deposit, a withdrawal and a postback through the sidecar and the simulator' },
    keygen: { run: keygen, summary: 'make an RSA key pair and print the public key fingerprint' },
    check: { run: check, summary: 'check config, key, TLS, login and clock skew against the gateway' },
    sign: { run: sign, summary: 'print the signing string and headers for one request' },
    verify: { run: verify, summary: 'explain whether a captured request or postback signature verifies' },
};
