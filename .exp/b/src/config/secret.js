import { inspect } from 'node:util';
const REDACTED = '[redacted]';
/**
 * Wraps a secret so that logging, JSON.stringify or util.inspect of any object holding it shows "[redacted]".
 * The value is reachable only through reveal(), which makes every use greppable.
 */
export class Secret {
    #value;
    constructor(value) {
        this.#value = value;
    }
    reveal() {
        return this.#value;
    }
    toJSON() {
        return REDACTED;
    }
    toString() {
        return REDACTED;
    }
    [inspect.custom]() {
        return REDACTED;
    }
}
