/**
 * A response with a status other than the route's, returned from `PhaseRunner.finish()`:
 * it is stored with the last phase and sent as it is, first time and on every replay.
 *
 * @example return respond(402, { error: 'card_declined' });
 */
export class PhaseResponse<T = unknown> {
  constructor(
    readonly status: number,
    readonly body: T,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {}
}

/** Shorthand for `new PhaseResponse(status, body, headers)`. */
export function respond<T>(
  status: number,
  body: T,
  headers: Record<string, string> = {},
): PhaseResponse<T> {
  return new PhaseResponse(status, body, headers);
}
