import {
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModulesContainer } from '@nestjs/core';
import { type Subscription } from 'rxjs';
import { IDEMPOTENT_MESSAGE_OPTIONS } from '../shapes/idempotency.constants.js';
import { InvalidIdempotencyOptionsError } from '../idempotency-options.js';
import { classMethods } from '../routes/class-methods.js';
import { type IdempotentMessageOptions } from './idempotent-message.options.js';
import { type AckingHandler, ackRefusal } from './transport-ack.js';

/** `@nestjs/microservices`' metadata keys, read by name: the package is optional. */
const MESSAGE_PATTERN = 'microservices:pattern';
const PATTERN_TRANSPORT = 'microservices:transport';

/** A transport server as far as the check touches it. */
interface TransportServer {
  listen(callback: (error?: unknown) => void): unknown;
}

/**
 * Refuses `@IdempotentMessage({ ack: true })` on a RabbitMQ transport that acknowledges by
 * itself (`noAck: true`, Nest's default), at start-up: run, each of the library's acks closes
 * the channel and the consumer stops. Nest hands every transport server to the modules'
 * registry as it is made (`createMicroservice()`, `connectMicroservice()`); the check reads
 * each as it comes. A server it refuses cannot start: its `listen()` fails with the refusal,
 * since a hybrid app starts its transports (`startAllMicroservices()`) before any lifecycle
 * hook runs; the bootstrap hook fails too, for a microservice app, whose hooks come first.
 */
@Injectable()
export class MessageAckCheck implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly refusals: string[] = [];
  private readonly subscription?: Subscription;

  constructor(discovery: DiscoveryService, scanner: MetadataScanner, modules: ModulesContainer) {
    // In the constructor: a hybrid app connects and starts its transports before any hook.
    const handlers = ackingHandlers(discovery, scanner);
    if (handlers.length === 0) return;
    // An older Nest without the registry: nothing to read, nothing refused.
    this.subscription = modules.getRpcTargetRegistry?.<TransportServer>().subscribe((server) => {
      const refusal = ackRefusal(server, handlers);
      if (refusal === undefined) return;
      this.refusals.push(refusal);
      const error = new InvalidIdempotencyOptionsError(refusal);
      new Logger('Idempotency').error(error.message);
      server.listen = (callback) => callback(error);
    });
  }

  onApplicationBootstrap(): void {
    if (this.refusals.length > 0) {
      throw new InvalidIdempotencyOptionsError(this.refusals.join('; '));
    }
  }

  onModuleDestroy(): void {
    this.subscription?.unsubscribe();
  }
}

/** The message handlers of the app's controllers with `ack: true`, and their transports. */
function ackingHandlers(discovery: DiscoveryService, scanner: MetadataScanner): AckingHandler[] {
  const controllers = discovery.getControllers().map((wrapper) => wrapper.metatype);
  const names = (prototype: object) => scanner.getAllMethodNames(prototype);
  const handlers: AckingHandler[] = [];
  for (const { type, name, handler } of classMethods(controllers, names)) {
    const options = Reflect.getMetadata(IDEMPOTENT_MESSAGE_OPTIONS, handler) as
      IdempotentMessageOptions | undefined;
    if (options?.ack !== true || !Reflect.hasMetadata(MESSAGE_PATTERN, handler)) continue;
    handlers.push({
      name: `${type.name}.${name}`,
      transport: Reflect.getMetadata(PATTERN_TRANSPORT, handler) as unknown,
    });
  }
  return handlers;
}
