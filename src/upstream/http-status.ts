/**
 * A 2xx: the one answer class that says the request was taken (RFC 9110, section 15.3), whoever answered: the
 * gateway, the forward proxy's CONNECT, the application a postback is delivered to. Undefined: no answer at all.
 */
export function isSuccessStatus(status: number | undefined): boolean {
  return status !== undefined && status >= 200 && status < 300;
}
