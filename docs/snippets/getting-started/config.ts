import { Injectable, Module } from '@nestjs/common';

@Injectable()
export class ConfigService {
  readonly retentionMs = Number(process.env.IDEMPOTENCY_RETENTION_MS ?? 86_400_000);
}

@Module({ providers: [ConfigService], exports: [ConfigService] })
export class ConfigModule {}
