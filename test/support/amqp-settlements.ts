import amqplib from 'amqplib';
import { RABBITMQ_URL } from './brokers.js';

/** How a delivery was settled with RabbitMQ: acknowledged, put back, or rejected for good. */
export type Settlement = 'ack' | 'requeue' | 'reject';

/** Every settlement this process sends RabbitMQ, by the tag its message's data carries. */
export interface Settlements {
  of(tag: string): Settlement[];
  /** Puts amqplib's own `ack` and `nack` back. */
  restore(): void;
}

type ChannelPrototype = {
  ack(message: amqplib.Message, allUpTo?: boolean): void;
  nack(message: amqplib.Message, allUpTo?: boolean, requeue?: boolean): void;
};

/**
 * Records how each delivery an in-process consumer receives is settled, as the broker hears
 * it: amqplib's channel `ack` and `nack` (every channel's: amqplib exports no Channel class, so
 * its prototype is reached through a channel of its own) write down the message's
 * `data[field]`, then do what they did. A message that is never settled has no entry.
 */
export async function recordSettlements(field: string): Promise<Settlements> {
  const probe = await amqplib.connect(RABBITMQ_URL);
  const channel = await probe.createChannel();
  const prototype = Object.getPrototypeOf(channel) as ChannelPrototype;
  await probe.close();
  const { ack, nack } = prototype;
  const seen = new Map<string, Settlement[]>();
  const note = (message: amqplib.Message, settlement: Settlement) => {
    let tag = '?';
    try {
      const { data } = JSON.parse(message.content.toString()) as { data: Record<string, unknown> };
      tag = String(data[field]);
    } catch {
      // Not a Nest message: recorded under '?'.
    }
    seen.set(tag, [...(seen.get(tag) ?? []), settlement]);
  };
  prototype.ack = function (message, allUpTo) {
    note(message, 'ack');
    return ack.call(this, message, allUpTo);
  };
  prototype.nack = function (message, allUpTo, requeue) {
    note(message, requeue === false ? 'reject' : 'requeue');
    return nack.call(this, message, allUpTo, requeue);
  };
  return {
    of: (tag) => [...(seen.get(tag) ?? [])],
    restore: () => {
      prototype.ack = ack;
      prototype.nack = nack;
    },
  };
}
