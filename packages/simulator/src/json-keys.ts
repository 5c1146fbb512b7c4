// JSON.parse silently keeps the last of duplicate keys. For the envelope that is a signature bypass waiting to
// happen (the signed "data" and the acted-on "data" may differ between parsers), so we look at the raw text.

/** The first top-level key that occurs twice in a JSON object text already accepted by JSON.parse, if any. */
export function duplicateTopLevelKey(body: Buffer): string | undefined {
  const seen = new Set<string>();
  for (const key of topLevelKeys(body.toString('utf8'))) {
    if (seen.has(key)) return key;
    seen.add(key);
  }
  return undefined;
}

/** Only valid JSON reaches this scanner, so it tracks just nesting, strings and the commas between members. */
export function topLevelKeys(text: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const end = stringEnd(text, i);
      // Decoded, so "\u0064ata" counts as "data".
      if (depth === 1 && expectKey) keys.push(JSON.parse(text.slice(i, end + 1)) as string);
      expectKey = false;
      i = end;
    } else if (c === '{' || c === '[') {
      depth++;
      expectKey = depth === 1 && c === '{';
    } else if (c === '}' || c === ']') {
      depth--;
    } else if (c === ',' && depth === 1) {
      expectKey = true;
    }
  }
  return keys;
}

function stringEnd(text: string, start: number): number {
  let i = start + 1;
  while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
  return i;
}
