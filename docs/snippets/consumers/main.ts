// main.ts of a RabbitMQ consumer: with `@IdempotentMessage({ ack: true })` the library
// acknowledges each delivery after its commit, so the transport must not (noAck: false).
import { NestFactory } from '@nestjs/core';
import { type MicroserviceOptions, Transport } from '@nestjs/microservices';
import { AppModule } from './app.module.js';

const app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, {
  transport: Transport.RMQ,
  options: {
    urls: [process.env.RABBITMQ_URL ?? 'amqp://localhost:5672'],
    queue: 'settlements',
    noAck: false,
    // Given-up messages go to the queue's dead-letter exchange, if it has one.
    queueOptions: { durable: true, arguments: { 'x-dead-letter-exchange': 'settlements.dlx' } },
  },
});
await app.listen();
