import { type ServerResponse } from 'node:http';

/** Node's response under either adapter: Express's is one, Fastify's reply wraps it. */
export function rawResponse(response: object): ServerResponse {
  return ((response as { raw?: ServerResponse }).raw ?? response) as ServerResponse;
}
