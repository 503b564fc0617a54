/**
 * Module resolution hooks (node:module register()) under which `typeorm` and
 * `@nestjs/typeorm` cannot be found, as in an app that never installed them.
 */
const DENIED = /^(typeorm|@nestjs\/typeorm)(\/|$)/;

interface ResolveContext {
  parentURL?: string;
}
type NextResolve = (specifier: string, context: ResolveContext) => Promise<unknown>;

export async function resolve(
  specifier: string,
  context: ResolveContext,
  next: NextResolve,
): Promise<unknown> {
  if (DENIED.test(specifier)) {
    throw Object.assign(new Error(`Cannot find package '${specifier}' (denied by the test)`), {
      code: 'ERR_MODULE_NOT_FOUND',
    });
  }
  return next(specifier, context);
}
