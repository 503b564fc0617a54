import {
  type CanActivate,
  createParamDecorator,
  type ExecutionContext,
  Injectable,
  UnauthorizedException,
} from '@nestjs/common';

const TENANT = /^[1-9][0-9]{0,18}$/;
const MAX_TENANT = 9223372036854775807n;

/** The tenant of a request, from `X-Tenant-Id`: a positive 64-bit integer, else undefined. */
export function tenantOf(
  headers: Record<string, string | string[] | undefined>,
): string | undefined {
  const value = headers['x-tenant-id'];
  if (typeof value !== 'string' || !TENANT.test(value)) return undefined;
  return BigInt(value) <= MAX_TENANT ? value : undefined;
}

/** Every route needs a tenant: 401 without a valid `X-Tenant-Id`. Guards run before all else. */
@Injectable()
export class TenantGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string> }>();
    if (tenantOf(request.headers) === undefined) {
      throw new UnauthorizedException({
        error: 'unauthorized',
        message: 'X-Tenant-Id must be a positive integer',
        statusCode: 401,
      });
    }
    return true;
  }
}

/** The request's tenant id, as text (a bigint column). */
export const Tenant = createParamDecorator((_data: unknown, context: ExecutionContext) => {
  const request = context.switchToHttp().getRequest<{ headers: Record<string, string> }>();
  return tenantOf(request.headers) as string;
});
