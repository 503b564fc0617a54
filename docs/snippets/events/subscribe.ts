import { Logger } from '@nestjs/common';
import { IDEMPOTENCY_CHANNELS } from 'nestjs-idempotency-pg';
import { subscribe } from 'node:diagnostics_channel';

const logger = new Logger('Idempotency');
subscribe(IDEMPOTENCY_CHANNELS.storedError, (event) => logger.warn(event));
