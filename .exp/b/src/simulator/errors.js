// Every refusal the simulator sends goes through this one class, so the status, the public code and the
// detailed reason for the log are decided together at the check that failed, and one function writes them out.
export class SimError extends Error {
    status;
    code;
    details;
    headers;
    name = 'SimError';
    constructor(status, code, message, 
    /** Extra log fields that explain the refusal; never secrets, tokens, signatures or payload data. */
    details = {}, headers = {}) {
        super(message);
        this.status = status;
        this.code = code;
        this.details = details;
        this.headers = headers;
    }
    toBody() {
        return { code: this.code, message: this.message };
    }
}
/** Token rejections use the spec's fixed code (2.5, 5.1), so clients can recognise "get a new token". */
export function tokenRejected(message, details = {}) {
    return new SimError(401, 'FAILED', message, details);
}
/** Signature problems: the spec leaves the status open; we chose 401 throughout (documented assumption). */
export function signatureError(code, message, details = {}) {
    return new SimError(401, code, message, details);
}
export function badRequest(code, message) {
    return new SimError(400, code, message);
}
