/** An `@IdempotentMessage({ ack: true })` handler, as the start-up check finds it. */
export interface AckingHandler {
  /** `Class.method`. */
  name: string;
  /** The transport named in its `@EventPattern(pattern, transport)`; undefined for any. */
  transport?: unknown;
}

/**
 * Why `ack: true` cannot work on the handlers a transport server runs, or undefined when it
 * can. Read from the server as Nest builds it (duck-typed: the library does not import
 * `@nestjs/microservices`). A RabbitMQ server (the one with a `noAck` setting) that runs with
 * `noAck: true`, Nest's default, has the broker count each delivery acknowledged as it is
 * sent: an ack of the library's then names a delivery tag the broker does not know, and the
 * broker closes the channel (406), which stops the consumer. Transports without
 * acknowledgements (core NATS, TCP, Redis) have nothing for `ack` to do: it means nothing
 * there, so that one handler may serve RabbitMQ and NATS at once.
 */
export function ackRefusal(
  server: unknown,
  handlers: readonly AckingHandler[],
): string | undefined {
  const { noAck, transportId } = (server ?? {}) as { noAck?: unknown; transportId?: unknown };
  if (noAck !== true) return undefined;
  // Nest registers a handler on every server unless its pattern names another transport.
  const runs = handlers.filter(
    ({ transport }) =>
      transport === undefined || transportId === undefined || transport === transportId,
  );
  if (runs.length === 0) return undefined;
  return (
    `@IdempotentMessage({ ack: true }) on ${runs.map(({ name }) => name).join(', ')}: the ` +
    "RabbitMQ transport runs with noAck: true (Nest's default when the option is left out), " +
    "so the broker counts each delivery acknowledged as it sends it, and the library's ack " +
    'would close the channel (406 PRECONDITION_FAILED, unknown delivery tag). Set noAck: ' +
    "false in the transport's options, or leave ack off"
  );
}
