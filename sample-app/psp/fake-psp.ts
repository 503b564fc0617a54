import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';

/** One authorization, as the fake PSP answers it. */
export interface Authorization {
  id: string;
  amount: number;
  currency: string;
  customer: string;
}

interface Answer {
  status: number;
  body: unknown;
}

export interface FakePspOptions {
  /** How long each new authorization takes (`PSP_DELAY_MS`). */
  delayMs?: number;
  port?: number;
  host?: string;
}

/** A running fake PSP. `delayMs` may be changed while it runs (tests slow it down). */
export interface FakePsp {
  url: string;
  port: number;
  delayMs: number;
  /** Every authorization made, each once however often its key was retried. */
  authorizations(): Authorization[];
  /** How many authorization requests arrived, retries included. */
  requestCount(): number;
  /** Resolves when the next authorization request arrives. */
  nextRequest(): Promise<void>;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
}

function send(res: ServerResponse, status: number, body: unknown) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

/**
 * A payment service provider that honours idempotency keys the way real ones do: a key seen
 * before gets the first answer again and authorizes nothing new, also when two calls with one
 * key arrive at once (the second waits for the first's answer).
 */
export async function startFakePsp(options: FakePspOptions = {}): Promise<FakePsp> {
  const answers = new Map<string, Promise<Answer>>();
  const made: Authorization[] = [];
  let requests = 0;
  let waiters: (() => void)[] = [];

  const authorize = async (body: Record<string, unknown>): Promise<Answer> => {
    await sleep(psp.delayMs);
    const { amount, currency, customer } = body as Partial<Authorization>;
    if (
      typeof amount !== 'number' ||
      typeof currency !== 'string' ||
      typeof customer !== 'string'
    ) {
      return { status: 400, body: { error: 'invalid_request' } };
    }
    if (customer === 'cus_decline') return { status: 402, body: { error: 'card_declined' } };
    if (customer === 'cus_psp_error') return { status: 500, body: { error: 'internal_error' } };
    const authorization = { id: `auth_${randomUUID()}`, amount, currency, customer };
    made.push(authorization);
    return { status: 201, body: authorization };
  };

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://psp');
    if (url.pathname !== '/v1/authorizations') return send(res, 404, { error: 'not_found' });
    if (req.method === 'GET') {
      const customer = url.searchParams.get('customer');
      return send(
        res,
        200,
        made.filter((a) => customer === null || a.customer === customer),
      );
    }
    if (req.method !== 'POST') return send(res, 405, { error: 'method_not_allowed' });
    requests++;
    const current = waiters;
    waiters = [];
    current.forEach((wake) => wake());
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string' || key.length === 0) {
      return send(res, 400, { error: 'idempotency_key_required' });
    }
    readJson(req).then(
      (body) => {
        let answer = answers.get(key);
        if (!answer) {
          answer = authorize(body as Record<string, unknown>);
          answers.set(key, answer);
        }
        return answer.then((a) => send(res, a.status, a.body));
      },
      () => send(res, 400, { error: 'invalid_json' }),
    );
  });

  await new Promise<void>((resolve) =>
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve),
  );
  const port = (server.address() as AddressInfo).port;
  const psp: FakePsp = {
    url: `http://127.0.0.1:${port}`,
    port,
    delayMs: options.delayMs ?? 0,
    authorizations: () => [...made],
    requestCount: () => requests,
    nextRequest: () => new Promise<void>((resolve) => waiters.push(resolve)),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return psp;
}
