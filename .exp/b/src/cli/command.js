/** Exit codes as values (cloud-sql-proxy style): 0 ok, 1 a failed check or runtime failure, 2 bad usage. */
export const EXIT = { ok: 0, failed: 1, usage: 2 };
