/** Tracks a server's connections and in-flight requests so shutdown can wait for the work, not guess. */
export class ConnectionTracker {
    server;
    inFlight = 0;
    idleWaiters = [];
    constructor(server) {
        this.server = server;
        server.on('request', (_req, res) => {
            this.inFlight++;
            res.once('close', () => {
                this.inFlight--;
                if (this.inFlight === 0)
                    this.idleWaiters.splice(0).forEach((wake) => wake());
            });
        });
    }
    get active() {
        return this.inFlight;
    }
    /** Resolves when no request is in flight, or after `maxMs`, whichever comes first; true when drained. */
    waitIdle(maxMs) {
        if (this.inFlight === 0)
            return Promise.resolve(true);
        return new Promise((resolve) => {
            const timer = setTimeout(() => resolve(false), maxMs);
            this.idleWaiters.push(() => {
                clearTimeout(timer);
                resolve(true);
            });
        });
    }
}
export function listen(server, host, port) {
    return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
            server.off('error', reject);
            const address = server.address();
            if (address === null || typeof address === 'string')
                return reject(new Error('no TCP address'));
            const hostPart = address.family === 'IPv6' ? `[${address.address}]` : address.address;
            resolve(`http://${hostPart}:${address.port}`);
        });
    });
}
export function closeServer(server) {
    return new Promise((resolve) => {
        if (!server.listening)
            return resolve();
        server.close(() => resolve());
        server.closeIdleConnections();
    });
}
export function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}
