import { ConfigurableModuleBuilder } from '@nestjs/common';
import { type IdempotencyModuleOptions } from './shapes/idempotency-options.interface.js';

/**
 * `IdempotencyModule.forRoot()` / `forRootAsync()`, built by Nest's own builder. The module is
 * global by default so that `@Idempotent()` works in every feature module.
 */
export const {
  ConfigurableModuleClass,
  MODULE_OPTIONS_TOKEN: IDEMPOTENCY_MODULE_OPTIONS,
  OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<IdempotencyModuleOptions>()
  .setClassMethodName('forRoot')
  .setExtras({ isGlobal: true }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
  }))
  .build();

/** Injection token of the options with every default filled in. */
export const RESOLVED_IDEMPOTENCY_OPTIONS = Symbol('ResolvedIdempotencyOptions');
