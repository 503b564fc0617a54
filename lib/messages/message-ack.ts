/** Settles a delivery with its broker, when the library is the one to acknowledge it. */
export interface MessageAck {
  /** Whether the library settles deliveries with the broker here (else the calls do nothing). */
  readonly settles: boolean;
  ack(): void;
  redeliver(): void;
  reject(): void;
}

const NOTHING: MessageAck = {
  settles: false,
  ack: () => undefined,
  redeliver: () => undefined,
  reject: () => undefined,
};

/**
 * With `ack: true` on a RabbitMQ consumer that runs with `noAck: false`, the delivery is
 * acknowledged after its transaction commits (so a consumer killed in between gets it again,
 * and finds it done), requeued after a failure, and rejected without requeue once given up
 * (to the queue's dead-letter exchange, if it has one). Elsewhere nothing is sent: the
 * transport acknowledges on its own.
 */
export function messageAck(context: unknown, ack: boolean): MessageAck {
  const rmq = context as {
    getChannelRef?: () => {
      ack(message: unknown): void;
      nack(message: unknown, all: boolean, requeue: boolean): void;
    };
    getMessage?: () => unknown;
  };
  if (!ack || typeof rmq.getChannelRef !== 'function' || typeof rmq.getMessage !== 'function') {
    return NOTHING;
  }
  const channel = rmq.getChannelRef();
  const message = rmq.getMessage();
  return {
    settles: true,
    ack: () => channel.ack(message),
    redeliver: () => channel.nack(message, false, true),
    reject: () => channel.nack(message, false, false),
  };
}
