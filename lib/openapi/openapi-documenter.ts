import { type Provider } from '@nestjs/common';

/** Placeholder: documents every @Idempotent() route for @nestjs/swagger (to be written). */
export const IDEMPOTENCY_OPENAPI = Symbol('IDEMPOTENCY_OPENAPI');

export const openApiDocumenterProvider: Provider = {
  provide: IDEMPOTENCY_OPENAPI,
  useValue: undefined,
};
