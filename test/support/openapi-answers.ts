// Checks a live answer of the sidecar against an OpenAPI document with a JSON Schema 2020-12 validator (ajv's
// Ajv2020, the dialect of OpenAPI 3.1): the response the document declares for the request's path, method and
// status (or for requests outside every operation, components.responses.unrouted-<status>), its required headers,
// each header's schema, and the body against the content schema of its media type.
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { IncomingHttpHeaders } from 'node:http';

export interface LiveAnswer {
  readonly method: string;
  readonly path: string;
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

type Node = Record<string, unknown>;

const DOCUMENT_ID = 'https://signing-sidecar.invalid/openapi.json';

/** The problems of `answer` against the document; empty when it matches. */
export type AnswerCheck = (answer: LiveAnswer) => string[];

export function answerChecker(document: Node): AnswerCheck {
  // strict off: the document is an OpenAPI document, not a schema; only the schemas inside it are compiled.
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  ajv.addSchema({ ...document, $id: DOCUMENT_ID });
  const resolve = (node: Node): Node => {
    const target = node.$ref;
    if (typeof target !== 'string') return node;
    return resolve(pointer(document, target));
  };
  return (answer) => {
    const located = locate(document, answer);
    if (typeof located === 'string') return [located];
    const response = resolve(located.node);
    const problems: string[] = [];
    for (const [name, header] of Object.entries((response.headers ?? {}) as Record<string, Node>)) {
      const declared = resolve(header);
      const value = answer.headers[name.toLowerCase()];
      if (value === undefined) {
        if (declared.required === true) problems.push(`header ${name} is required, absent`);
        continue;
      }
      const validate = ajv.getSchema(
        `${DOCUMENT_ID}#${pointerOf(header, `${located.at}/headers/${escape(name)}`)}/schema`,
      );
      if (validate && !validate(value)) problems.push(`header ${name}: ${ajv.errorsText(validate.errors)}`);
    }
    const content = (response.content ?? {}) as Record<string, Node>;
    const mediaType = String(answer.headers['content-type'] ?? '')
      .split(';')[0]!
      .trim();
    const declaredType = mediaType in content ? mediaType : '*/*' in content ? '*/*' : undefined;
    if (declaredType === undefined) {
      problems.push(`content type ${mediaType || '(none)'} not declared for ${located.at}`);
      return problems;
    }
    if (!('schema' in content[declaredType]!)) return problems;
    let body: unknown;
    try {
      body = JSON.parse(answer.body.toString('utf8'));
    } catch {
      return [...problems, `body is not JSON: ${answer.body.toString('utf8').slice(0, 80)}`];
    }
    const validate = ajv.getSchema(`${DOCUMENT_ID}#${located.at}/content/${escape(declaredType)}/schema`);
    if (!validate) return [...problems, `no schema at ${located.at}`];
    if (!validate(body)) problems.push(`body ${JSON.stringify(body)}: ${ajv.errorsText(validate.errors)}`);
    return problems;
  };
}

/** The JSON pointer of the response object the document declares for the answer (as written: maybe a $ref). */
function locate(document: Node, answer: LiveAnswer): { node: Node; at: string } | string {
  const paths = document.paths as Record<string, Record<string, Node>>;
  const operation = paths[answer.path]?.[answer.method.toLowerCase()];
  if (operation === undefined) {
    const name = `unrouted-${answer.status}`;
    const responses = (document.components as Record<string, Record<string, Node>>).responses!;
    if (responses[name] === undefined) return `no operation ${answer.method} ${answer.path}, no ${name}`;
    return { node: responses[name], at: `/components/responses/${name}` };
  }
  const responses = operation.responses as Record<string, Node>;
  const status = String(answer.status);
  const key = [status, `${status[0]}XX`, 'default'].find((candidate) => responses[candidate] !== undefined);
  if (key === undefined) return `no response ${status} for ${answer.method} ${answer.path}`;
  const at = `/paths/${escape(answer.path)}/${answer.method.toLowerCase()}/responses/${key}`;
  const node = responses[key]!;
  return typeof node.$ref === 'string' ? { node, at: node.$ref.slice(1) } : { node, at };
}

/** A header object's own pointer: where its $ref points, or where it is written. */
function pointerOf(header: Node, written: string): string {
  return typeof header.$ref === 'string' ? header.$ref.slice(1) : written;
}

function pointer(document: Node, ref: string): Node {
  let node: unknown = document;
  for (const part of ref.replace(/^#\//, '').split('/')) node = (node as Node)[unescape(part)];
  if (node === undefined) throw new Error(`dangling $ref ${ref}`);
  return node as Node;
}

const escape = (part: string): string => part.replaceAll('~', '~0').replaceAll('/', '~1');
const unescape = (part: string): string => part.replaceAll('~1', '/').replaceAll('~0', '~');
