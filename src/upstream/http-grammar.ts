// RFC 9110 5.1 and 5.5: the characters allowed in a field name (a token) and a field value. The request writer and
// the response parser check against the same two rules.

export const FIELD_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** Visible ASCII, space, tab and obs-text (0x80-0xFF): no CR, LF, NUL or other control character. */
export const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
