/** Writes one line per check as soon as it is known, and remembers whether any failed. */
export class CheckReport {
    out;
    #failed = false;
    constructor(out) {
        this.out = out;
    }
    line(mark, name, detail) {
        if (mark === '✘')
            this.#failed = true;
        this.out.write(`${mark} ${name}: ${detail}\n`);
    }
    get failed() {
        return this.#failed;
    }
}
