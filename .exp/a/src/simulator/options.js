export const DEFAULT_HOST = '127.0.0.1';
export const DEFAULT_REFRESH_TOKEN_FIELD = 'refresh_token';
/** Throws a RangeError naming the option, so a bad test or CLI flag fails before anything listens. */
export function checkNumericOptions(options) {
    const positive = (name, value) => {
        if (value !== undefined && (!Number.isFinite(value) || value <= 0)) {
            throw new RangeError(`${name} must be a positive number, got ${value}`);
        }
    };
    positive('accessTokenTtlSeconds', options.accessTokenTtlSeconds);
    positive('refreshTokenTtlSeconds', options.refreshTokenTtlSeconds);
    positive('maxBodyBytes', options.maxBodyBytes);
    positive('nonceWindowSeconds', options.nonceWindowSeconds);
    const delay = options.postbackDelayMs;
    if (delay !== undefined && delay !== null && (!Number.isFinite(delay) || delay < 0)) {
        throw new RangeError(`postbackDelayMs must be >= 0 or null, got ${delay}`);
    }
    const port = options.port;
    if (port !== undefined && (!Number.isInteger(port) || port < 0 || port > 65535)) {
        throw new RangeError(`port must be 0..65535, got ${port}`);
    }
}
