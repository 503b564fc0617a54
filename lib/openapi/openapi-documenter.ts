import { HttpStatus, type Provider, RequestMethod } from '@nestjs/common';
import { HTTP_CODE_METADATA, METHOD_METADATA } from '@nestjs/common/constants.js';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { IDEMPOTENT_ROUTE_OPTIONS } from '../shapes/idempotency.constants.js';
import { classMethods } from '../routes/class-methods.js';
import {
  type IdempotencyRouteOptions,
  type ResolvedIdempotencyOptions,
} from '../shapes/idempotency-options.interface.js';
import { resolveRouteOptions } from '../idempotency-options.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import {
  idempotentRouteDocs,
  type ParameterMetadata,
  type ResponsesMetadata,
} from './route-docs.js';

/** @nestjs/swagger's metadata keys, written by name: the library does not import swagger. */
const API_PARAMETERS = 'swagger/apiParameters';
const API_RESPONSE = 'swagger/apiResponse';
const API_HEADERS = 'swagger/apiHeaders';

/**
 * The handler's swagger metadata as the app's decorators left it, kept on the first write:
 * each app created in the process documents from it, so a second app (a test suite's) neither
 * doubles the library's entries nor keeps another app's header name.
 */
const BEFORE_IDEMPOTENCY = 'idempotency:openapi-before';

interface SwaggerMetadata {
  parameters: readonly ParameterMetadata[] | undefined;
  responses: ResponsesMetadata | undefined;
}

export const IDEMPOTENCY_OPENAPI = Symbol('IDEMPOTENCY_OPENAPI');

/**
 * Documents every `@Idempotent()` route for @nestjs/swagger: the key header, the problem
 * answers, and the replay header on the success answer. It runs when the app is created, not
 * in the decorator: the decorators around `@Idempotent()` and the module's options are only all
 * known then, and `SwaggerModule.createDocument()` comes after `NestFactory.create()`.
 * Its value is the documented handlers' names.
 */
export const openApiDocumenterProvider: Provider = {
  provide: IDEMPOTENCY_OPENAPI,
  inject: [DiscoveryService, RESOLVED_IDEMPOTENCY_OPTIONS],
  useFactory: (discovery: DiscoveryService, options: ResolvedIdempotencyOptions) => {
    const scanner = new MetadataScanner();
    const documented: string[] = [];
    const controllers = discovery.getControllers().map(({ metatype }) => metatype);
    const names = (prototype: object) => scanner.getAllMethodNames(prototype);
    for (const { type, name, handler } of classMethods(controllers, names)) {
      const own = Reflect.getMetadata(IDEMPOTENT_ROUTE_OPTIONS, handler) as
        IdempotencyRouteOptions | undefined;
      // Not a route (the start-up check reports it): nothing swagger would show.
      if (!own || Reflect.getMetadata(METHOD_METADATA, handler) === undefined) continue;
      documentRoute(handler, own, type, options);
      documented.push(`${type.name}.${name}`);
    }
    return documented;
  },
};

function documentRoute(
  handler: object,
  own: IdempotencyRouteOptions,
  controller: object,
  options: ResolvedIdempotencyOptions,
): void {
  const route = resolveRouteOptions(own, options.route);
  const before = swaggerMetadataBefore(handler);
  const docs = idempotentRouteDocs({
    keyHeader: route.key.header,
    required: route.required,
    successStatus: successStatus(handler),
    parameters: before.parameters,
    classParameters: Reflect.getMetadata(API_HEADERS, controller) as
      ParameterMetadata[] | undefined,
    responses: before.responses,
    classResponses: Reflect.getMetadata(API_RESPONSE, controller) as ResponsesMetadata | undefined,
  });
  if (docs.parameters === undefined) Reflect.deleteMetadata(API_PARAMETERS, handler);
  else Reflect.defineMetadata(API_PARAMETERS, docs.parameters, handler);
  Reflect.defineMetadata(API_RESPONSE, docs.responses, handler);
}

function swaggerMetadataBefore(handler: object): SwaggerMetadata {
  const kept = Reflect.getOwnMetadata(BEFORE_IDEMPOTENCY, handler) as SwaggerMetadata | undefined;
  if (kept) return kept;
  const before: SwaggerMetadata = {
    parameters: Reflect.getMetadata(API_PARAMETERS, handler) as ParameterMetadata[] | undefined,
    responses: Reflect.getMetadata(API_RESPONSE, handler) as ResponsesMetadata | undefined,
  };
  Reflect.defineMetadata(BEFORE_IDEMPOTENCY, before, handler);
  return before;
}

/** The status swagger gives a route without responses (its `getStatusCode()`). */
function successStatus(handler: object): number {
  const status = Reflect.getMetadata(HTTP_CODE_METADATA, handler) as number | undefined;
  if (status) return status;
  const method = Reflect.getMetadata(METHOD_METADATA, handler) as RequestMethod;
  return method === RequestMethod.POST ? HttpStatus.CREATED : HttpStatus.OK;
}
