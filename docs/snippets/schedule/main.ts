// main.ts of a worker without HTTP routes: its scheduled tasks run while it does. Run as
// many replicas as you like: each tick runs on one of them.
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

const app = await NestFactory.createApplicationContext(AppModule);
app.enableShutdownHooks();
new Logger('Worker').log('its scheduled tasks run');
