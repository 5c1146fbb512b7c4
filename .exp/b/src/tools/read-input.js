import { readFile } from 'node:fs/promises';
// A capture is a few kilobytes; anything far larger is the wrong file and should not be buffered whole.
const MAX_CAPTURE_BYTES = 4 * 1024 * 1024;
/** Reads a file, or the given stream when the path is "-". Bytes are kept as UTF-8 text (the signed form). */
export async function readInput(path, stdin) {
    if (path !== '-') {
        try {
            return await readFile(path, 'utf8');
        }
        catch (err) {
            throw new Error(`cannot read ${path}: ${err.code ?? 'error'}`);
        }
    }
    const chunks = [];
    let size = 0;
    for await (const chunk of stdin()) {
        const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
        size += buf.length;
        if (size > MAX_CAPTURE_BYTES)
            throw new Error(`standard input exceeds ${MAX_CAPTURE_BYTES} bytes`);
        chunks.push(buf);
    }
    return Buffer.concat(chunks).toString('utf8');
}
