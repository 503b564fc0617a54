import { Inject, Injectable, type OnApplicationBootstrap, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModuleRef } from '@nestjs/core';
import { INTERCEPTORS_METADATA, METHOD_METADATA } from '@nestjs/common/constants.js';
import {
  IDEMPOTENT_MESSAGE_OPTIONS,
  IDEMPOTENT_ROUTE_OPTIONS,
} from '../shapes/idempotency.constants.js';
import { IdempotencyInterceptor } from '../idempotency.interceptor.js';
import { InvalidIdempotencyOptionsError, resolveRouteOptions } from '../idempotency-options.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import {
  type IdempotencyRouteOptions,
  type ResolvedIdempotencyOptions,
} from '../shapes/idempotency-options.interface.js';
import { ClaimStores } from '../claim-stores.js';
import { declaredKind, resolvedField } from '../graphql/resolver-placement.js';
import { noteGlobalFieldMiddleware, noteResolvedField } from '../graphql/resolved-fields.js';
import { classMethods } from './class-methods.js';
import {
  type DecoratedMethod,
  keyArgProblem,
  messageHandlerProblem,
  routeProblem,
  type SchemaArgument,
} from './route-problem.js';

/** The part of Nest's GraphQL module options read here (`GqlModuleOptions`). */
interface GqlOptions {
  buildSchemaOptions?: { fieldMiddleware?: readonly unknown[] };
}

/** The metadata keys of the packages the app may use; read by name, none of them imported. */
const MESSAGE_PATTERN = 'microservices:pattern';
const GATEWAY_MESSAGE = 'websockets:message_mapping';

/**
 * Fails the app's start-up when `@Idempotent()` sits where the interceptor never runs (a
 * message handler, a provider's method, a gateway, a `GET`) or must not (a GraphQL query or
 * subscription), rather than letting such a method run with no key and no protection while
 * the code reads as if it had both. A GraphQL mutation resolver is the one provider's method
 * it takes.
 */
@Injectable()
export class IdempotentRoutesCheck implements OnModuleInit, OnApplicationBootstrap {
  /**
   * Mutations keyed by an argument, checked against the schema once GraphQL has built it:
   * the schema says what arguments a mutation has, whatever declared them (`@Args()`, an
   * `@ArgsType()` class, a schema file: adversaries 70, 71).
   */
  private readonly keyArgsToCheck: { where: string; keyArg: string; field: string }[] = [];

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly stores: ClaimStores,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
    private readonly moduleRef: ModuleRef,
  ) {}

  onModuleInit(): void {
    noteGlobalFieldMiddleware(this.hasGlobalFieldMiddleware());
    const controllers = new Set(this.discovery.getControllers().map((wrapper) => wrapper.metatype));
    const classes = new Set<unknown>(controllers);
    for (const wrapper of this.discovery.getProviders()) {
      if (wrapper.metatype) classes.add(wrapper.metatype);
    }
    const problems: string[] = [];
    const names = (prototype: object) => this.scanner.getAllMethodNames(prototype);
    for (const { type, name, handler } of classMethods(classes, names)) {
      // A field the app resolves itself: named when it is under an idempotent mutation.
      const field = resolvedField(type, name, handler);
      if (field) noteResolvedField(field);
      const route = Reflect.hasMetadata(IDEMPOTENT_ROUTE_OPTIONS, handler);
      const message = Reflect.hasMetadata(IDEMPOTENT_MESSAGE_OPTIONS, handler);
      if (!route && !message) continue;
      const method = describe(type, name, handler, controllers);
      if (route) {
        const options = this.routeOptionsOf(handler);
        method.claimStore = this.stores.forRoute(options);
        method.keyArg = options.key.arg;
        if (method.resolver === 'mutation' && method.keyArg !== undefined) {
          const field = mutationName(handler, name);
          this.keyArgsToCheck.push({ where: method.name, keyArg: method.keyArg, field });
        }
      }
      const problem = route ? routeProblem(method) : messageHandlerProblem(method);
      if (problem) problems.push(problem);
    }
    if (problems.length > 0) throw new InvalidIdempotencyOptionsError(problems.join('; '));
  }

  /** The key arguments of the keyed mutations, by the schema GraphQL built (see above). */
  async onApplicationBootstrap(): Promise<void> {
    if (this.keyArgsToCheck.length === 0) return;
    let mutations: Record<string, { args: readonly SchemaArgument[] }> | undefined;
    try {
      const { GraphQLSchemaHost } = await import('@nestjs/graphql');
      const host = this.moduleRef.get(GraphQLSchemaHost, { strict: false });
      mutations = host.schema.getMutationType()?.getFields();
    } catch {
      return; // no schema built (no GraphQLModule): nothing to check against
    }
    const problems = this.keyArgsToCheck.flatMap(({ where, keyArg, field }) => {
      const args = mutations?.[field]?.args;
      const problem = args && keyArgProblem(where, keyArg, args);
      return problem ? [problem] : [];
    });
    if (problems.length > 0) throw new InvalidIdempotencyOptionsError(problems.join('; '));
  }

  /**
   * Whether the app's `GraphQLModule` sets Nest's global field middleware: its options
   * (`GqlModuleOptions`, Nest's token) hold it; no GraphQL module, none.
   */
  private hasGlobalFieldMiddleware(): boolean {
    try {
      const options = this.moduleRef.get<string, GqlOptions | undefined>('GqlModuleOptions', {
        strict: false,
      });
      return (options?.buildSchemaOptions?.fieldMiddleware?.length ?? 0) > 0;
    } catch {
      return false; // no GraphQLModule
    }
  }

  private routeOptionsOf(handler: object) {
    const own = Reflect.getMetadata(IDEMPOTENT_ROUTE_OPTIONS, handler) as IdempotencyRouteOptions;
    return resolveRouteOptions(own ?? {}, this.options.route);
  }
}

function describe(
  type: new () => object,
  name: string,
  handler: object,
  controllers: Set<unknown>,
): DecoratedMethod {
  const interceptors = [
    ...((Reflect.getMetadata(INTERCEPTORS_METADATA, handler) as unknown[] | undefined) ?? []),
    ...((Reflect.getMetadata(INTERCEPTORS_METADATA, type) as unknown[] | undefined) ?? []),
  ];
  return {
    name: `${type.name}.${name}`,
    inController: controllers.has(type),
    httpMethod: Reflect.getMetadata(METHOD_METADATA, handler) as DecoratedMethod['httpMethod'],
    intercepted: interceptors.includes(IdempotencyInterceptor),
    messageHandler: Reflect.hasMetadata(MESSAGE_PATTERN, handler),
    gatewayHandler: Reflect.hasMetadata(GATEWAY_MESSAGE, handler),
    resolver: declaredKind(handler),
  };
}

/** A mutation resolver's field name: its `@Mutation('name')`, else its method's name. */
function mutationName(handler: object, name: string): string {
  const field = Reflect.getMetadata('graphql:resolver_name', handler) as unknown;
  return typeof field === 'string' ? field : name;
}
