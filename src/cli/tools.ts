// The operator tools, loaded together on demand (commands.ts): `serve` never loads them.
export { check } from './check.js';
export { keygen } from './keygen.js';
export { limits } from './limits.js';
export { postbacks } from './postbacks.js';
export { sign } from './sign.js';
export { verify } from './verify.js';
export { version } from './version.js';
