/**
 * A request whose body no parser read (yet) when the library computes the fingerprint.
 * Fingerprinted without its body, every such request would look the same, and a retry with
 * another body would get the first one's answer; so it is refused before anything is claimed,
 * as a 400 `request_invalid` (a client that sends a type the app does not parse gets a 4xx),
 * and the app's log gets `advice`, for a route that meant to take such bodies.
 */
export class UnreadBodyError extends Error {
  override readonly name = 'UnreadBodyError';
  /** What the app should change, if it meant to take such bodies (logged, not answered). */
  readonly advice: string;

  constructor(readonly mediaType: string) {
    super(`no body parser read its ${mediaType || 'untyped'} body`);
    this.advice = unreadBodyAdvice(mediaType);
  }
}

/**
 * An upload whose bytes were not kept (multer's disk storage, `@fastify/multipart`'s
 * `onFile`): the route is misconfigured, so it reaches Nest's exception handling (a 500, its
 * message logged) before anything is claimed or run.
 */
export class UnkeptUploadError extends Error {
  override readonly name = 'UnkeptUploadError';

  constructor(readonly field: string) {
    super(unkeptFileMessage(field));
  }
}

/** Whether the request's headers announce a body (RFC 9112 §6.3: a length, or chunks). */
export function announcesBody(headers: Record<string, string | string[] | undefined>): boolean {
  if (headers['transfer-encoding'] !== undefined) return true;
  const length = Number(headers['content-length'] ?? 0);
  return Number.isFinite(length) && length > 0;
}

/** What to change, for a route that means to take bodies of this type. */
export function unreadBodyAdvice(mediaType: string): string {
  if (mediaType === 'multipart/form-data') {
    return (
      'on Express, write @Idempotent() above @UseInterceptors(FileInterceptor(...)) so that ' +
      'multer reads the upload before the interceptor (decorators nearer the method run ' +
      'first); on Fastify, register @fastify/multipart with attachFieldsToBody: true'
    );
  }
  return "register a parser for it (on Express, app.useBodyParser('text') or 'raw')";
}

/** The message for an uploaded file whose bytes were not kept. */
export function unkeptFileMessage(field: string): string {
  return (
    `The file uploaded in field ${JSON.stringify(field)} was not kept in memory (multer's disk ` +
    "storage, or @fastify/multipart's onFile), so its bytes cannot join the fingerprint: " +
    'keep uploads in memory on @Idempotent() routes (multer and @fastify/multipart do by default)'
  );
}
