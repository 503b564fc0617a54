import { connect } from 'node:net';

/** A response as read off the socket. */
export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/**
 * Sends one HTTP/1.1 request byte for byte (headers repeated, bytes no HTTP client would
 * send) and reads the whole response (`Connection: close`), for the hostile-input sweep.
 */
export function rawRequest(
  port: number,
  method: string,
  path: string,
  headers: [string, string | Buffer][],
  body: Buffer = Buffer.alloc(0),
  timeoutMs = 10_000,
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer to ${method} ${path} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', (error) => {
      // A server that answers early (413) may close before the whole body was written.
      if (chunks.length === 0) {
        clearTimeout(timer);
        reject(error);
      }
    });
    socket.on('close', () => {
      clearTimeout(timer);
      const raw = Buffer.concat(chunks);
      const split = raw.indexOf('\r\n\r\n');
      if (split < 0) return reject(new Error(`no HTTP response: ${raw.toString('latin1')}`));
      const [statusLine, ...lines] = raw.subarray(0, split).toString('latin1').split('\r\n');
      const parsed: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        parsed[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      let payload: Buffer = raw.subarray(split + 4);
      if (parsed['transfer-encoding'] === 'chunked') payload = dechunk(payload);
      resolve({ status: Number(statusLine.split(' ')[1]), headers: parsed, body: payload });
    });
    const head = [
      `${method} ${path} HTTP/1.1`,
      'Host: 127.0.0.1',
      'Connection: close',
      `Content-Length: ${body.length}`,
    ]
      .map((line) => Buffer.from(`${line}\r\n`, 'latin1'))
      .concat(
        headers.map(([name, value]) =>
          Buffer.concat([Buffer.from(`${name}: `), Buffer.from(value), Buffer.from('\r\n')]),
        ),
      );
    socket.write(Buffer.concat([...head, Buffer.from('\r\n'), body]));
  });
}

function dechunk(payload: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const end = payload.indexOf('\r\n', at);
    if (end < 0) break;
    const size = parseInt(payload.subarray(at, end).toString(), 16);
    if (!size) break;
    parts.push(payload.subarray(end + 2, end + 2 + size));
    at = end + 2 + size + 2;
  }
  return Buffer.concat(parts);
}
